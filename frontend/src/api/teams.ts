import { listOf, request, type ListBody } from "./client";
import { invalidate, useQuery } from "./useQuery";
import type { ApiTokenRow, AuditEvent, CreatedToken, Member, Quota, Role } from "./types";

// /api/v1/teams/{id}/…: members, tokens, quota, audit log.

const teamPath = (teamId: number) => `/api/v1/teams/${teamId}`;

export function useMembers(teamId: number | null) {
  return useQuery<Member[]>(teamId ? `${teamPath(teamId)}/members` : null);
}

export async function addMember(teamId: number, username: string, role: Role): Promise<Member> {
  const member = await request<Member>(`${teamPath(teamId)}/members`, { method: "POST", body: { username, role } });
  invalidate(`${teamPath(teamId)}/members`);
  return member;
}

export async function setMemberRole(teamId: number, userId: number, role: Role): Promise<Member> {
  const member = await request<Member>(`${teamPath(teamId)}/members/${userId}`, { method: "PATCH", body: { role } });
  invalidate(`${teamPath(teamId)}/members`);
  return member;
}

export async function removeMember(teamId: number, userId: number): Promise<void> {
  await request(`${teamPath(teamId)}/members/${userId}`, { method: "DELETE" });
  invalidate(`${teamPath(teamId)}/members`);
}

export function useTokens(teamId: number | null) {
  return useQuery<ApiTokenRow[]>(teamId ? `${teamPath(teamId)}/tokens` : null);
}

export async function createToken(teamId: number, name: string): Promise<CreatedToken> {
  const token = await request<CreatedToken>(`${teamPath(teamId)}/tokens`, { method: "POST", body: { name } });
  invalidate(`${teamPath(teamId)}/tokens`);
  return token;
}

export async function revokeToken(teamId: number, tokenId: number): Promise<void> {
  await request(`${teamPath(teamId)}/tokens/${tokenId}`, { method: "DELETE" });
  invalidate(`${teamPath(teamId)}/tokens`);
}

export function useQuota(teamId: number | null) {
  return useQuery<Quota>(teamId ? `${teamPath(teamId)}/quota` : null);
}

export function useAudit(teamId: number | null) {
  return useQuery<AuditEvent[], ListBody<AuditEvent>>(
    teamId ? `${teamPath(teamId)}/audit` : null, { limit: 100 }, listOf);
}
