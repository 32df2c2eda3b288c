"""Bad input: random and mutated specs never crash the validator and every rejection names
a path; random YAML is refused only with SpecError (or YAML's own error); names take any
unicode and refuse the oversized cleanly; every session write needs the CSRF token."""

from __future__ import annotations

import copy
import json
import typing

import pytest
import yaml
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from paddock.experiments.models import Experiment
from paddock.teams.models import Role, Team
from tests.platform.conftest import launch
from tests.security.test_cross_team import API_ROUTES, _fill
from workers.spec import RunSpec, SpecError, load_spec, spec_errors

DEFAULT = RunSpec().to_dict() if hasattr(RunSpec(), "to_dict") else RunSpec().model_dump()
SECTIONS = set(RunSpec.model_fields) | {f.alias for f in RunSpec.model_fields.values() if f.alias}

scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30)
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),  # fmt: skip
    max_leaves=12,
)


def _paths(tree, prefix=()):
    yield prefix
    if isinstance(tree, dict):
        for key, child in tree.items():
            yield from _paths(child, (*prefix, key))


PATHS = [p for p in _paths(DEFAULT) if p]


def _free_form(model=RunSpec, prefix=()):
    """Paths of the spec's free-form mappings (fields typed `dict[...]`): their keys are the
    user's (e.g. data.chat_template_kwargs), so an unknown key there is data, not a typo."""
    for name, field in model.model_fields.items():
        path = (*prefix, field.alias or name)
        if typing.get_origin(field.annotation) is dict:
            yield path
        elif isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
            yield from _free_form(field.annotation, path)


FREE_FORM = set(_free_form())


def _assert_named(errors, data):
    for error in errors:
        assert isinstance(error["field"], str) and error["field"], (error, data)
        assert isinstance(error["message"], str) and error["message"], (error, data)
        field = error["field"]
        assert field == "(root)" or any(
            field == str(key) or field.startswith(f"{key}.") for key in [*SECTIONS, *data]
        ), (error, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(SECTIONS)) | st.text(max_size=8), values,
                       max_size=6))  # fmt: skip
def test_random_specs_never_crash_the_validator(data):
    _assert_named(spec_errors(data), data)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(PATHS), st.sampled_from(["set", "delete", "unknown"]), values)
@example(("data", "chat_template_kwargs"), "unknown", False)  # a CI run's find: a user's key
@example(("data", "chat_template_kwargs"), "unknown", {"x": 1})  # ...and a bad value there
def test_mutated_specs_are_refused_with_a_path_or_accepted(path, how, value):
    data = copy.deepcopy(DEFAULT)
    node, free_form = data, False
    for key in path[:-1]:
        node = node[key]
    if how == "set":
        node[path[-1]] = value
    elif how == "delete":
        del node[path[-1]]
    else:
        mapping = isinstance(node[path[-1]], dict)
        target = node[path[-1]] if mapping else node
        target["not_a_key"] = value
        free_form = (path if mapping else path[:-1]) in FREE_FORM
    errors = spec_errors(data)
    _assert_named(errors, data)
    if how == "unknown" and (errors or not free_form):
        # a typo is refused by name; a free-form key is accepted or refused by name too
        assert any("not_a_key" in e["field"] for e in errors), errors
    if not errors:
        RunSpec.model_validate(data)  # accepted means it really builds


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.builds(lambda d: yaml.safe_dump(d), values))
def test_random_yaml_is_refused_only_with_spec_or_yaml_errors(text):
    try:
        load_spec(text + "\n")
    except SpecError as exc:
        assert exc.errors and all(e["field"] for e in exc.errors)
    except yaml.YAMLError:
        pass


NAMES = ["ünïcödé 実験 🚀", "\u202eevil", "a\x00b", "<script>alert(1)</script>", "x" * 10_000,
         "  ", "'; DROP TABLE teams; --"]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_names_take_unicode_and_refuse_the_oversized_cleanly(world, client_as, name):
    client = client_as(world.users_a[Role.MEMBER])
    reply = launch(client, world.team_a, name=name)
    assert reply.status_code in (201, 400), reply.content[:200]
    if reply.status_code == 400:
        assert reply.json()["field"] == "name"
    else:
        assert Experiment.objects.get(pk=reply.json()["experiment"]["id"]
                                      if "experiment" in reply.json() else reply.json()["id"]
                                      ).name == name  # fmt: skip
    team = client_as(world.users_a[Role.OWNER]).post("/api/v1/teams", {"name": name}, format="json")
    assert team.status_code in (201, 400, 409), team.content[:200]
    if team.status_code == 201:
        assert Team.objects.get(pk=team.json()["id"]).name == name


WRITES = ["post", "put", "patch", "delete"]


@pytest.mark.django_db
def test_every_session_write_needs_the_csrf_token(world, launched):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.users_a[Role.OWNER])
    ids = dict.fromkeys(["team", "experiment", "config", "run", "user", "token", "checkpoint",
                         "cluster", "pool", "sweep", "secret"],
                        launched[0]["runs"][0]["id"])  # fmt: skip
    ids["team"] = world.team_a.pk
    checked = 0
    for route in API_ROUTES:
        url = _fill(route, ids)
        for method in WRITES:
            reply = getattr(client, method)(url, {}, format="json")
            if reply.status_code == 405:
                continue
            checked += 1
            if route.endswith(("/ingest", "/bootstrap")):
                # bearer-only endpoints: a session cookie is no credential there
                assert reply.status_code in (400, 401), (method, url, reply.content[:200])
            else:
                assert reply.status_code == 403, (method, url, reply.content[:200])
                # the API's one error shape, whether DRF or Django's middleware refused
                if not route.endswith(("schema/", "docs/")):  # read-only views, HTML
                    assert reply.json()["code"] == "csrf_failed", (method, url)
    assert checked >= 15
    # login and logout: Django's CSRF middleware guards them (login CSRF)
    browser = Client(enforce_csrf_checks=True)
    body = json.dumps({"username": "a-owner", "password": "x"})
    refused = browser.post("/api/v1/session/login", body, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"


@pytest.mark.django_db
def test_an_oversized_or_malformed_upload_is_refused_and_stores_nothing(
    world, client_as, settings, tmp_path
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from paddock.experiments.models import Dataset

    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    settings.PADDOCK_MAX_DATASET_BYTES = 1024  # the real limit is 256 MiB
    client = client_as(world.users_a[Role.MEMBER])
    row = b'{"prompt": "1+1", "answer": "2"}\n'
    for data, field in ((row * 64, "file"), (b"\xff\xfe not json\n", "file"),
                        (b"", "file")):  # fmt: skip
        upload = SimpleUploadedFile("d.jsonl", data)
        reply = client.post("/api/v1/datasets", {"team": world.team_a.pk, "name": "d",
                                                 "file": upload}, format="multipart")  # fmt: skip
        assert reply.status_code == 400, reply.content[:200]
        assert reply.json()["field"] == field
    assert not Dataset.objects.exists()
    assert not (tmp_path / "artifacts").exists() or not any((tmp_path / "artifacts").rglob("*.*"))
