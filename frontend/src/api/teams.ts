import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { listOf, request, type ListBody } from "./client";
import { queryClient } from "./queryClient";
import { queryKeys } from "./queryKeys";
import type { ApiTokenRow, AuditEvent, CreatedToken, Member, Quota, Role, TeamSecret } from "./types";

// /api/v1/teams/{id}/…: members, tokens, secrets, quota, audit log.

const teamPath = (teamId: number) => `/api/v1/teams/${teamId}`;

export function useMembers(teamId: number) {
  return useQuery({
    queryKey: queryKeys.teams.members(teamId),
    queryFn: ({ signal }) => request<Member[]>(`${teamPath(teamId)}/members`, { signal }),
  });
}

const membersChanged = (teamId: number) =>
  queryClient.invalidateQueries({ queryKey: queryKeys.teams.members(teamId) });

export async function addMember(teamId: number, username: string, role: Role): Promise<Member> {
  const member = await request<Member>(`${teamPath(teamId)}/members`, { method: "POST", body: { username, role } });
  void membersChanged(teamId);
  return member;
}

export async function setMemberRole(teamId: number, userId: number, role: Role): Promise<Member> {
  const member = await request<Member>(`${teamPath(teamId)}/members/${userId}`, { method: "PATCH", body: { role } });
  void membersChanged(teamId);
  return member;
}

export async function removeMember(teamId: number, userId: number): Promise<void> {
  await request(`${teamPath(teamId)}/members/${userId}`, { method: "DELETE" });
  void membersChanged(teamId);
}

export function useTokens(teamId: number) {
  return useQuery({
    queryKey: queryKeys.teams.tokens(teamId),
    queryFn: ({ signal }) => request<ApiTokenRow[]>(`${teamPath(teamId)}/tokens`, { signal }),
  });
}

const tokensChanged = (teamId: number) =>
  queryClient.invalidateQueries({ queryKey: queryKeys.teams.tokens(teamId) });

export async function createToken(teamId: number, name: string): Promise<CreatedToken> {
  const token = await request<CreatedToken>(`${teamPath(teamId)}/tokens`, { method: "POST", body: { name } });
  void tokensChanged(teamId);
  return token;
}

export async function revokeToken(teamId: number, tokenId: number): Promise<void> {
  await request(`${teamPath(teamId)}/tokens/${tokenId}`, { method: "DELETE" });
  void tokensChanged(teamId);
}

export function useSecrets(teamId: number) {
  return useQuery({
    queryKey: queryKeys.teams.secrets(teamId),
    queryFn: ({ signal }) => request<TeamSecret[]>(`${teamPath(teamId)}/secrets`, { signal }),
  });
}

const secretPath = (teamId: number, name: string) => `${teamPath(teamId)}/secrets/${encodeURIComponent(name)}`;

/** A set or a delete changes the list and adds to the audit log. */
function useSecretsChanged(teamId: number) {
  const client = useQueryClient();
  return () => Promise.all([
    client.invalidateQueries({ queryKey: queryKeys.teams.secrets(teamId) }),
    client.invalidateQueries({ queryKey: queryKeys.teams.audit(teamId) }),
  ]);
}

/** PUT /teams/{id}/secrets/{name}: create or replace. The answer is the masked row; the
 * value is sent, never read back. gcTime 0: the finished mutation (whose variables hold the
 * value) leaves the cache as soon as no component watches it. */
export function useSetSecret(teamId: number) {
  const changed = useSecretsChanged(teamId);
  return useMutation({
    mutationFn: ({ name, value }: { name: string; value: string }) =>
      request<TeamSecret>(secretPath(teamId, name), { method: "PUT", body: { value } }),
    onSuccess: changed,
    gcTime: 0,
  });
}

export function useDeleteSecret(teamId: number) {
  const changed = useSecretsChanged(teamId);
  return useMutation({
    mutationFn: (name: string) => request<void>(secretPath(teamId, name), { method: "DELETE" }),
    onSuccess: changed,
  });
}

export function useQuota(teamId: number) {
  return useQuery({
    queryKey: queryKeys.teams.quota(teamId),
    queryFn: ({ signal }) => request<Quota>(`${teamPath(teamId)}/quota`, { signal }),
  });
}

export function useAudit(teamId: number) {
  return useQuery({
    queryKey: queryKeys.teams.audit(teamId),
    queryFn: async ({ signal }) => listOf(await request<ListBody<AuditEvent>>(`${teamPath(teamId)}/audit`,
      { query: { limit: 100 }, signal })),
  });
}
