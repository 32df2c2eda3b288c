"""Input that parses but must still be refused, each with a 400 naming the field: spec
integers outside what the platform stores (one range for every spec integer, bounds for the
counts that reach a column), non-finite spec floats, an empty model.path, unknown keys in a
request body, control characters in names, descriptions and tags, malformed cursors."""

from __future__ import annotations

from base64 import b64encode

import pytest

from paddock.experiments.models import Experiment, Run
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC, launch
from workers.spec import MAX_SEED, MAX_STEPS, SpecError, load_spec, spec_errors

pytestmark = pytest.mark.django_db

OUT_OF_RANGE = [
    ({"train": {"steps": 2**63}}, "train.steps"),
    ({"train": {"steps": MAX_STEPS + 1}}, "train.steps"),  # a run's total_steps is 32-bit
    ({"seed": 2**63}, "seed"),
    ({"seed": 2**40}, "seed"),  # Run.seed is 32-bit, and a launch adds up to 15 to it
    ({"seed": MAX_SEED + 1}, "seed"),  # 2**31: past the column
    ({"seed": -1}, "seed"),
    ({"data": {"eval_size": 2**63}}, "data.eval_size"),
    ({"data": {"eval_size": -(2**63) - 1}}, "data.eval_size"),
    ({"data": {"eval_size": "99999999999999999999"}}, "data.eval_size"),  # coerced from text
    ({"rollout": {"max_new_tokens": 2**64}}, "rollout.max_new_tokens"),
    ({"resources": {"max_attempts": 2**31}}, "resources.max_attempts"),
    ({"algorithm": {"num_generations": 2**63}}, "algorithm.num_generations"),
    ({"model": {"path": ""}}, "model.path"),
]


@pytest.mark.parametrize(("edit", "field"), OUT_OF_RANGE, ids=[f for _, f in OUT_OF_RANGE])
def test_out_of_range_spec_integers_are_refused_at_validate_only_and_at_launch(
    world, client_as, edit, field
):
    client = client_as(world.users_a[Role.MEMBER])
    spec = {**TINY_SPEC, **{k: {**TINY_SPEC.get(k, {}), **v} if isinstance(v, dict) else v
                            for k, v in edit.items()}}  # fmt: skip
    checked = launch(client, world.team_a, spec=spec, validate_only=True)
    if checked.status_code == 200:  # the spec's own check: a report naming the field
        report = checked.json()
        assert not report["valid"] and report["errors"][0]["field"].endswith(field), report
    else:  # past 64 bits the body's reader refuses it first (core/jsonbody.py)
        assert checked.status_code == 400, checked.content[:300]
        assert checked.json()["field"] == f"spec.{field}", checked.json()
    reply = launch(client, world.team_a, spec=spec)
    assert reply.status_code == 400, reply.content[:300]
    assert reply.json()["field"] == f"spec.{field}", reply.json()
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_seeds_up_to_the_highest_launch_and_past_it_are_refused(world, client_as):
    client = client_as(world.users_a[Role.MEMBER])
    refused = launch(client, world.team_a, spec={**TINY_SPEC, "seed": MAX_SEED - 14}, seeds=16)
    assert refused.status_code == 400 and refused.json()["field"] == "spec.seed", refused.json()
    reply = launch(client, world.team_a, spec={**TINY_SPEC, "seed": MAX_SEED - 15}, seeds=16)
    assert reply.status_code == 201, reply.content[:300]
    assert max(Run.objects.values_list("seed", flat=True)) == MAX_SEED == 2**31 - 1


def test_a_clone_edit_out_of_range_is_refused(world, client_as, launched):
    client = client_as(world.users_a[Role.MEMBER])
    experiment = launched[0]["experiment"]["id"]
    before = Run.objects.count()
    for edits in ({"seed": 2**40}, {"train.steps": 2**62}, {"data.eval_size": 2**63 - 1 + 1}):
        url = f"/api/v1/experiments/{experiment}/clone"
        reply = client.post(url, {"edits": edits}, format="json")
        assert reply.status_code == 400, (edits, reply.content[:300])
        assert reply.json()["field"], reply.json()
    assert Run.objects.count() == before


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("train:\n  lr: 1e400\n", "train.lr"),
        ("train:\n  lr: .nan\n", "train.lr"),
        ("algorithm:\n  kl_coef: .inf\n", "algorithm.kl_coef"),
        ("train:\n  betas: [0.9, .inf]\n", "train.betas.1"),
        ("seed: 99999999999999999999999\n", "seed"),
    ],
)
def test_non_finite_or_oversized_yaml_numbers_are_refused_with_their_path(text, field):
    # the CLI path (YAML), where the JSON reader of the platform is not in the way
    with pytest.raises(SpecError) as exc:
        load_spec(text)
    assert exc.value.errors[0]["field"] == field, exc.value.errors


def test_every_spec_integer_field_refuses_values_past_64_bits():
    """Walk the defaults: whatever integer field a spec has, now or later, 2**63 is refused
    with its path (the one range), and a small value keeps validating as before."""
    from workers.spec import RunSpec

    def ints(tree, path=()):
        if isinstance(tree, dict):
            for key, child in tree.items():
                yield from ints(child, (*path, key))
        elif isinstance(tree, int) and not isinstance(tree, bool):
            yield path

    fields = list(ints(RunSpec().to_dict()))
    assert len(fields) >= 20
    for path in fields:
        data: dict = {}
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = 2**63
        errors = spec_errors(data)
        assert errors and errors[0]["field"] == ".".join(path), (path, errors)


def test_unknown_keys_in_a_body_are_refused_naming_the_key(world, client_as, launched):
    client = client_as(world.users_a[Role.OWNER])
    experiment = launched[0]["experiment"]["id"]
    base = {"team": world.team_a.pk, "name": "x", "spec": TINY_SPEC}
    cases = [
        ("post", "/api/v1/experiments", {**base, "sede": 3}, "sede"),
        ("post", "/api/v1/experiments", {**base, "validate-only": True}, "validate-only"),
        ("post", f"/api/v1/experiments/{experiment}/clone", {"edit": {"seed": 1}}, "edit"),
        ("patch", f"/api/v1/experiments/{experiment}", {"name": "n", "team": 2}, "team"),
        ("post", "/api/v1/teams", {"name": "t", "owner": 1}, "owner"),
        ("post", f"/api/v1/teams/{world.team_a.pk}/tokens", {"name": "t", "scope": "*"}, "scope"),
    ]
    before = Experiment.objects.count()
    for method, url, payload, key in cases:
        reply = getattr(client, method)(url, payload, format="json")
        assert reply.status_code == 400, (url, reply.content[:300])
        assert reply.json()["field"] == key and key in reply.json()["message"], reply.json()
    assert Experiment.objects.count() == before
    # and a body that is not an object at all
    reply = client.post("/api/v1/experiments", [base], format="json")
    assert reply.status_code == 400, reply.content[:300]


CONTROL = ["a\x1b[31mred", "line\rforged", "bell\x07", "nul\x00", "del\x7f", "c1\x85c1",
           "\u202eevil", "iso\u2066late", "sep\u2028arator"]  # fmt: skip


@pytest.mark.parametrize("bad", CONTROL, ids=range(len(CONTROL)))
def test_control_characters_are_refused_in_names_descriptions_and_tags(
    world, client_as, launched, bad
):
    client = client_as(world.users_a[Role.OWNER])
    experiment = launched[0]["experiment"]["id"]
    team = world.team_a.pk
    cases = [
        ("post", "/api/v1/experiments", {"team": team, "name": bad, "spec": TINY_SPEC}, "name"),
        ("post", "/api/v1/experiments",
         {"team": team, "name": "x", "spec": TINY_SPEC, "description": bad}, "description"),
        ("post", "/api/v1/experiments",
         {"team": team, "name": "x", "spec": TINY_SPEC, "tags": ["ok", bad]}, "tags.1"),
        ("patch", f"/api/v1/experiments/{experiment}", {"name": bad}, "name"),
        ("patch", f"/api/v1/experiments/{experiment}", {"description": bad}, "description"),
        ("patch", f"/api/v1/experiments/{experiment}", {"tags": [bad]}, "tags.0"),
        ("post", f"/api/v1/experiments/{experiment}/clone", {"name": bad}, "name"),
        ("post", f"/api/v1/experiments/{experiment}/clone", {"tags": [bad]}, "tags.0"),
        ("post", "/api/v1/teams", {"name": bad}, "name"),
        ("patch", f"/api/v1/teams/{team}", {"name": bad}, "name"),
        ("post", f"/api/v1/teams/{team}/tokens", {"name": bad}, "name"),
    ]  # fmt: skip
    before = Experiment.objects.count()
    for method, url, payload, field in cases:
        reply = getattr(client, method)(url, payload, format="json")
        assert reply.status_code == 400, (url, payload, reply.content[:300])
        assert reply.json()["field"] == field, (url, reply.json())
    assert Experiment.objects.count() == before


def test_a_description_keeps_its_line_breaks_and_names_keep_any_printable_text(
    world, client_as, launched
):
    client = client_as(world.users_a[Role.MEMBER])
    experiment = launched[0]["experiment"]["id"]
    text = {"name": "ünïcödé 実験 🚀 👩‍💻", "description": "line one\nline two\n\tindented",
            "tags": ["a-b", "ß"]}  # fmt: skip
    reply = client.patch(f"/api/v1/experiments/{experiment}", text, format="json")
    assert reply.status_code == 200, reply.content[:300]
    stored = Experiment.objects.get(pk=experiment)
    assert (stored.name, stored.description) == (text["name"], text["description"])


def _cursor(query: str) -> str:
    return b64encode(query.encode()).decode()


MALFORMED_CURSORS = ["!!!", "é", "%00", _cursor("p=abc"), _cursor("p=-1"), _cursor("p=1.5"),
                     _cursor("p=" + "9" * 30), _cursor("p=" + "0" * 5000 + "1"),
                     _cursor("o=-1&p=1"), _cursor("o=abc"), _cursor("r=x"),
                     _cursor("p=\u00e9"), "cD0x" * 1000]  # fmt: skip


@pytest.mark.parametrize("cursor", MALFORMED_CURSORS, ids=range(len(MALFORMED_CURSORS)))
def test_a_malformed_cursor_is_a_400(world, client_as, launched, cursor):
    client = client_as(world.users_a[Role.ADMIN])
    for url in ("/api/v1/experiments", "/api/v1/runs", "/api/v1/datasets",
                f"/api/v1/teams/{world.team_a.pk}/audit"):  # fmt: skip
        reply = client.get(url, {"cursor": cursor})
        assert reply.status_code == 400, (url, cursor, reply.status_code, reply.content[:200])
        assert reply.json()["field"] == "cursor", reply.json()


def test_the_cursors_the_api_hands_out_still_page(world, client_as):
    client = client_as(world.users_a[Role.MEMBER])
    for i in range(3):
        assert launch(client, world.team_a, name=f"e{i}").status_code == 201
    seen, url = [], "/api/v1/experiments?limit=1"
    while url:
        page = client.get(url).json()
        seen += [e["id"] for e in page["results"]]
        url = page["next"]
    assert seen == sorted(Experiment.objects.values_list("id", flat=True), reverse=True)
