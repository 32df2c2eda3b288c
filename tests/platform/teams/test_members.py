"""Members and roles: who may grant what, and a team always keeps an owner."""

import pytest

from paddock.teams.models import AuditEvent, Membership, Role


def url(world, user=None):
    base = f"/api/v1/teams/{world.team_a.pk}/members"
    return f"{base}/{user.pk}" if user else base


def test_creating_a_team_makes_the_creator_its_owner(world, client_as):
    reply = client_as(world.outsider).post("/api/v1/teams", {"name": "Vision Lab"}, format="json")
    assert reply.status_code == 201
    body = reply.json()
    assert body["slug"] == "vision-lab" and body["role"] == "owner"
    again = client_as(world.outsider).post("/api/v1/teams", {"name": "Vision Lab"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "slug_taken"


def test_only_owners_grant_the_owner_role(world, client_as):
    admin, owner = client_as(world.users_a[Role.ADMIN]), client_as(world.users_a[Role.OWNER])
    target = world.users_a[Role.MEMBER]
    reply = admin.patch(url(world, target), {"role": "owner"}, format="json")
    assert reply.status_code == 403
    reply = admin.patch(url(world, world.users_a[Role.OWNER]), {"role": "viewer"}, format="json")
    assert reply.status_code == 403
    assert owner.patch(url(world, target), {"role": "owner"}, format="json").status_code == 200


def test_the_last_owner_cannot_leave_nor_be_demoted(world, client_as):
    owner = world.users_a[Role.OWNER]
    client = client_as(owner)
    reply = client.patch(url(world, owner), {"role": "admin"}, format="json")
    assert reply.status_code == 409 and reply.json()["code"] == "last_owner"
    assert client.delete(url(world, owner)).status_code == 409
    assert Membership.objects.get(team=world.team_a, user=owner).role == Role.OWNER


def test_anyone_may_leave(world, client_as):
    viewer = world.users_a[Role.VIEWER]
    assert client_as(viewer).delete(url(world, viewer)).status_code == 204
    assert not Membership.objects.filter(team=world.team_a, user=viewer).exists()


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ({"username": "nobody", "role": "member"}, "user_not_found", "username"),
        ({"username": "a-viewer", "role": "member"}, "already_member", "username"),
        ({"username": "outsider", "role": "king"}, "invalid", "role"),
    ],
)
def test_adding_members_names_the_bad_field(world, client_as, payload, code, field):
    reply = client_as(world.users_a[Role.ADMIN]).post(url(world), payload, format="json")
    assert reply.status_code in (400, 409)
    assert (reply.json()["code"], reply.json()["field"]) == (code, field)


def test_every_member_write_is_audited(world, client_as):
    client = client_as(world.users_a[Role.OWNER])
    client.post(url(world), {"username": "outsider", "role": "viewer"}, format="json")
    client.patch(url(world, world.outsider), {"role": "member"}, format="json")
    client.delete(url(world, world.outsider))
    client.patch(f"/api/v1/teams/{world.team_a.pk}", {"name": "A!"}, format="json")
    events = list(AuditEvent.objects.filter(team=world.team_a).order_by("id"))
    assert [e.action for e in events] == ["member.add", "member.role", "member.remove",
                                          "team.update"]  # fmt: skip
    assert {e.actor_id for e in events} == {world.users_a[Role.OWNER].pk}
    assert events[1].data == {"role": ["viewer", "member"]}
    assert events[0].ip == "127.0.0.1"
