"""POST /configs/diff: a spec not stored yet (the launcher's edit) diffed against a stored
config version or another spec, by the one spec_diff rule, validated as a launch's spec."""

import copy

import pytest

from paddock.experiments.models import ConfigVersion
from paddock.teams.models import Role

pytestmark = pytest.mark.usefixtures("quiet_hooks")

DIFF = "/api/v1/configs/diff"


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def test_an_unsaved_edit_diffs_as_the_version_its_clone_stores(world, member, launched):
    source = launched[0]["experiment"]
    stored = ConfigVersion.objects.get(pk=source["config"]).spec
    edited = copy.deepcopy(stored)
    edited["train"]["lr"] = 3e-4
    edited["algorithm"]["kl_coef"] = 0.05
    del edited["data"]  # a section left out is its defaults, as a launch fills it in
    reply = member.post(DIFF, {"a": source["config"], "b_spec": edited}, format="json")
    assert reply.status_code == 200, reply.json()
    before_launch = reply.json()
    assert (before_launch["a"], before_launch["b"]) == (source["config"], None)

    # the reference: clone with those edits, then diff the two stored versions
    edits = {c["path"]: c["b"] for c in before_launch["changes"]}
    clone = member.post(f"/api/v1/experiments/{source['id']}/clone", {"edits": edits},
                        format="json")  # fmt: skip
    assert clone.status_code == 201, clone.json()
    launched_config = clone.json()["experiment"]["config"]
    stored_diff = member.get(DIFF, {"a": source["config"], "b": launched_config}).json()
    assert before_launch["changes"] == stored_diff["changes"]
    assert before_launch["changes"] == [
        {"path": "algorithm.kl_coef", "a": 0.0, "b": 0.05},
        {"path": "train.lr", "a": 0.0001, "b": 0.0003},
    ]


def test_two_specs_diff_normalized_with_the_side_that_has_a_key(member):
    a = {"rollout": {"backend": "torch"}, "train": {"steps": 10}}
    b = {"rollout": {"backend": "vllm"}, "train": {"steps": 10}}
    reply = member.post(DIFF, {"a_spec": a, "b_spec": b}, format="json")
    assert reply.status_code == 200, reply.json()
    body = reply.json()
    assert (body["a"], body["b"]) == (None, None)
    by_path = {c["path"]: c for c in body["changes"]}
    assert by_path["rollout.backend"] == {"path": "rollout.backend", "a": "torch", "b": "vllm"}
    assert by_path["rollout.max_batch_size"]["only_in"] == "a"  # torch's own option
    assert by_path["rollout.gpu_memory_utilization"]["only_in"] == "b"  # vLLM's
    assert "train.steps" not in by_path
    same = member.post(DIFF, {"a_spec": a, "b_spec": {**a, "seed": 0}}, format="json").json()
    assert same["changes"] == []  # the default written out is no change


@pytest.mark.parametrize(
    ("payload", "status", "code", "field"),
    [
        ({"a_spec": {}, "b_spec": {"train": {"steps": -1}}}, 400, "spec_invalid",
         "b_spec.train.steps"),
        ({"a_spec": {"algorithm": {"bogus": 1}}, "b_spec": {}}, 400, "spec_invalid",
         "a_spec.algorithm.bogus"),
        ({"a_spec": [1], "b_spec": {}}, 400, "spec_invalid", "a_spec"),
        ({"a_spec": {}, "b_spec": {"train": {"steps": 10**6 * 10**6}}}, 400, "spec_invalid",
         "b_spec.train.steps"),
        ({"a": 1, "a_spec": {}, "b_spec": {}}, 400, "invalid", "a"),
        ({"a_spec": {}}, 400, "invalid", "b"),
        ({"a_spec": None, "b_spec": {}}, 400, "invalid", "a_spec"),
        ({"a_spec": {}, "b": "x"}, 400, "invalid", "b"),
        ({"a_spec": {}, "b_spec": {}, "c": 1}, 400, "unknown_field", "c"),
        ({"a": 999999, "b_spec": {}}, 404, "not_found", None),
    ],
)  # fmt: skip
def test_bad_input_is_a_4xx_naming_the_field(member, payload, status, code, field):
    reply = member.post(DIFF, payload, format="json")
    assert (reply.status_code, reply.json()["code"], reply.json()["field"]) == (
        status, code, field)  # fmt: skip


def test_another_teams_version_is_not_found(world, client_as, launched):
    other = launched[1]["experiment"]["config"]  # team B's
    reply = client_as(world.users_a[Role.VIEWER]).post(DIFF, {"a": other, "b_spec": {}},
                                                       format="json")  # fmt: skip
    assert (reply.status_code, reply.json()["code"]) == (404, "not_found")


def test_a_diff_costs_a_fixed_number_of_queries(world, member, launched,
                                                django_assert_num_queries):  # fmt: skip
    config = launched[0]["experiment"]["config"]
    big = ConfigVersion.objects.get(pk=config).spec
    # the session (2), the actor's memberships (1), the version (1); a spec costs none
    with django_assert_num_queries(4):
        assert member.post(DIFF, {"a": config, "b_spec": big}, format="json").status_code == 200
    with django_assert_num_queries(3):
        assert member.post(DIFF, {"a_spec": {}, "b_spec": big}, format="json").status_code == 200
    with django_assert_num_queries(3):  # an invalid spec is refused before any read
        reply = member.post(DIFF, {"a": config, "b_spec": {"x": 1}}, format="json")
    assert reply.status_code == 400
