"""Hostile JSON bodies get a 400 naming what is wrong, never a 500, at every door: the REST
API (launch, clone, experiment edit, teams, tokens), the session login, dataset rows, the
bootstrap and ingest endpoints (Django's view and the ASGI route). One reader refuses them
all (paddock.core.jsonbody): nesting past MAX_DEPTH, a lone UTF-16 surrogate or a NUL in
any string, NaN / Infinity / numbers that overflow a double, integers past 64 bits."""

from __future__ import annotations

import json

import pytest
import requests
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from paddock.core.jsonbody import MAX_DEPTH, JsonBodyError, json_parse
from paddock.experiments.models import Dataset, Experiment, IngestBatch, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role

DEEP = {  # text, not Python values: json.dumps itself would recurse on these
    "5000 arrays": "[" * 5000 + "]" * 5000,
    "5000 objects": '{"a":' * 5000 + "1" + "}" * 5000,
    "500 arrays": "[" * 500 + "]" * 500,  # parses, then broke whatever walked it next
    "past the limit": "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
}
BAD_STRINGS = {"lone surrogate": '"\\udcff"', "lone high": '"a\\ud800b"', "NUL": '"a\\u0000b"'}
BAD_NUMBERS = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e400": "1e400",
               "2**63": str(2**63), "-2**63-1": str(-(2**63) - 1), "2**200": str(2**200),
               "5000 digits": "9" * 5000}  # fmt: skip
HOSTILE = {**DEEP, **BAD_STRINGS, **BAD_NUMBERS}


def _assert_refused(reply, where: str) -> dict:
    assert reply.status_code == 400, (where, reply.status_code, reply.content[:300])
    body = reply.json()
    assert set(body) >= {"code", "message", "field"} and body["message"], (where, body)
    return body


def test_the_reader_takes_what_is_fine_and_names_what_is_not():
    fine = (
        '{"a": [1, -2, 3.5, null, true, "ünï 🚀 \\ud83d\\ude80"], "b": {"c": 9223372036854775807}}'
    )
    assert json_parse(fine)["a"][5] == "ünï 🚀 🚀"  # a surrogate *pair* is a character
    assert json_parse("[" * MAX_DEPTH + "]" * MAX_DEPTH)  # exactly at the limit
    for value in HOSTILE.values():
        with pytest.raises(JsonBodyError):
            json_parse('{"x": {"y": [0, ' + value + "]}}")
    with pytest.raises(JsonBodyError) as exc:
        json_parse('{"spec": {"train": {"steps": ' + str(2**63) + "}}}")
    assert exc.value.field == "spec.train.steps"
    with pytest.raises(JsonBodyError) as exc:
        json_parse('{"tags": ["ok", "a\\u0000"]}')
    assert exc.value.field == "tags.1"
    with pytest.raises(JsonBodyError):
        json_parse(b"\xff\xfe{}")  # not UTF-8


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def _raw(client, method: str, url: str, text: str):
    return getattr(client, method)(url, text, content_type="application/json")


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_rest_body_refuses_hostile_json(world, member, launched, case):
    value = HOSTILE[case]
    experiment = launched[0]["experiment"]["id"]
    team = world.team_a.pk
    bodies = [
        ("post", "/api/v1/experiments", f'{{"team": {team}, "name": "x", "spec": {value}}}'),
        ("post", "/api/v1/experiments",
         f'{{"team": {team}, "name": "x", "spec": {{"train": {{"steps": {value}}}}}}}'),
        ("post", "/api/v1/experiments", value),
        ("post", f"/api/v1/experiments/{experiment}/clone",
         f'{{"edits": {{"train.steps": {value}}}, "validate_only": true}}'),
        ("post", f"/api/v1/experiments/{experiment}/clone", f'{{"edits": {{"a": {value}}}}}'),
        ("post", "/api/v1/configs/diff", f'{{"a_spec": {{}}, "b_spec": {value}}}'),
        ("post", "/api/v1/configs/diff", f'{{"a_spec": {{"train": {{"lr": {value}}}}}, "b": 1}}'),
        ("patch", f"/api/v1/experiments/{experiment}", f'{{"name": "n", "tags": {value}}}'),
        ("patch", f"/api/v1/experiments/{experiment}", f'{{"description": {value}}}'),
        ("post", "/api/v1/teams", f'{{"name": {value}}}'),
        ("post", f"/api/v1/teams/{team}/tokens", f'{{"name": "t", "expires_at": {value}}}'),
        ("post", f"/api/v1/teams/{team}/members", f'{{"username": {value}}}'),
    ]  # fmt: skip
    before = Experiment.objects.count(), Run.objects.count()
    for method, url, text in bodies:
        _assert_refused(_raw(member, method, url, text), f"{method} {url} {text[:80]}")
    assert (Experiment.objects.count(), Run.objects.count()) == before


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_session_login_refuses_hostile_json(world, case):
    value = HOSTILE[case]
    client = Client()
    for text in (f'{{"username": {value}, "password": "x"}}',
                 f'{{"username": "a-owner", "password": {value}}}', value):  # fmt: skip
        reply = client.post("/api/v1/session/login", text, content_type="application/json")
        body = _assert_refused(reply, text[:80])
        assert body["code"] in ("invalid_json", "required"), body


@pytest.mark.django_db
def test_a_lone_surrogate_in_a_login_username_is_a_400_naming_it(world):
    # the probe's case: the limiter hashed the username, and its UTF-8 encoding raised
    text = '{"username": "adm\\udcffin", "password": "x"}'
    reply = Client().post("/api/v1/session/login", text, content_type="application/json")
    assert _assert_refused(reply, text)["field"] == "username"


@pytest.mark.django_db
def test_an_oversized_body_is_a_413_or_400_never_read_whole(world, member):
    big = '{"team": 1, "name": "x", "spec": {"a": "' + "x" * (9 * 2**20) + '"}}'
    for url in ("/api/v1/experiments", "/api/v1/configs/diff"):
        reply = _raw(member, "post", url, big)
        assert reply.status_code == 413 and reply.json()["code"] == "body_too_large", url
    login = Client().post("/api/v1/session/login", big, content_type="application/json")
    assert login.status_code in (400, 413)


@pytest.mark.django_db
def test_oversized_login_fields_are_refused_before_the_limiter_and_the_hasher(world):
    client = Client()
    for body, field in (({"username": "u" * 151, "password": "x"}, "username"),
                        ({"username": "a-owner", "password": "p" * 5000}, "password"),
                        ({"username": "u" * 1_000_000, "password": "x"}, "username")):  # fmt: skip
        reply = client.post("/api/v1/session/login", json.dumps(body),
                            content_type="application/json")  # fmt: skip
        assert _assert_refused(reply, field)["field"] == field


@pytest.mark.django_db
def test_spec_strings_with_nul_are_refused_before_the_database(world, member):
    for spec in ('{"model": {"path": "/models/x\\u0000y"}}', '{"not\\u0000a key": 1}',
                 '{"data": {"task": "jsonl", "path": "/d/\\u0000.jsonl"}}'):  # fmt: skip
        text = f'{{"team": {world.team_a.pk}, "name": "x", "spec": {spec}}}'
        body = _assert_refused(_raw(member, "post", "/api/v1/experiments", text), spec)
        assert body["field"] and body["field"].startswith("spec"), body
    assert not Experiment.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["5000 arrays", "500 arrays", "NUL", "lone surrogate", "1e400"])
def test_dataset_rows_refuse_hostile_json(world, member, settings, tmp_path, case):
    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    row = f'{{"prompt": "1+1", "answer": {HOSTILE[case]}}}\n'.encode()
    upload = SimpleUploadedFile("d.jsonl", b'{"prompt": "2+2", "answer": "4"}\n' + row)
    reply = member.post("/api/v1/datasets", {"team": world.team_a.pk, "name": "d",
                                            "file": upload}, format="multipart")  # fmt: skip
    body = _assert_refused(reply, case)
    assert body["field"] == "file" and "line 2" in body["message"], body
    assert not Dataset.objects.exists()


def _dispatched_run(launched) -> tuple[Run, str]:
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run.refresh_from_db()
    run_transition(run=run, to_state="dispatching")
    return run, run_token_mint(run=run, dispatch=1)


def _ingest_bodies(value: str) -> list[str]:
    return [
        value,
        f'{{"dispatch": 1, "seq": 1, "events": [{{"type": "samples", "step": 1, '
        f'"items": [{{"prompt": {value}}}]}}]}}',
        f'{{"dispatch": 1, "seq": 1, "events": [{{"type": "metric", "step": 1, '
        f'"time": {value}, "values": {{"loss": 1}}}}]}}',
        f'{{"dispatch": 1, "seq": {value}, "events": []}}',
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_ingest_and_bootstrap_views_refuse_hostile_json(launched, client, case):
    run, token = _dispatched_run(launched)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    for text in _ingest_bodies(HOSTILE[case]):
        reply = client.post(f"/api/v1/runs/{run.pk}/ingest", text,
                            content_type="application/json", **auth)  # fmt: skip
        _assert_refused(reply, text[:80])
    text = f'{{"dispatch": {HOSTILE[case]}}}'
    url = f"/api/v1/runs/{run.pk}/bootstrap"
    reply = client.post(url, text, content_type="application/json", HTTP_AUTHORIZATION="Bearer x")
    assert _assert_refused(reply, "bootstrap")["field"] == "dispatch"
    assert not IngestBatch.objects.filter(run=run).exists()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_asgi_ingest_route_refuses_hostile_json(asgi_server, launched):
    run, token = _dispatched_run(launched)
    url = f"{asgi_server.url}/api/v1/runs/{run.pk}/ingest"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with requests.Session() as http:
        for case, value in HOSTILE.items():
            for text in _ingest_bodies(value):
                reply = http.post(url, data=text.encode(), headers=headers, timeout=30)
                _assert_refused(reply, f"{case}: {text[:80]}")
        # and the server still takes a good batch
        point = {"type": "metric", "step": 1, "time": 1764490000.0, "values": {"loss": 0.5}}
        good = {"dispatch": 1, "seq": 1, "events": [point]}
        assert http.post(url, data=json.dumps(good), headers=headers, timeout=30).status_code == 200
