"""Team secrets on the team page, in Chromium against the real server: set one, see it
masked, a refusal shown on its field, delete it; a viewer sees the list without the
controls; and the value is never in the page nor in any answer the page was given."""

from __future__ import annotations

import re
import secrets

import pytest
from playwright.sync_api import expect

from paddock.teams.models import TeamSecret
from paddock.teams.team_secrets import secrets_for_run
from tests.e2e.conftest import log_in, orm
from tests.platform.factories import MembershipFactory, TeamFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _viewer_team_with_a_secret(owner):
    team = TeamFactory(name="Vision", slug="vision")
    MembershipFactory(team=team, user=owner, role="viewer")
    TeamSecret.objects.create(team=team, name="VISION_KEY", sealed="v1:x", masked="••••")


def test_a_secret_is_set_masked_and_deleted_and_its_value_never_comes_back(
    people, asgi_server, browser_page
):
    team, owner = people
    orm(_viewer_team_with_a_secret, owner)
    value = f"sk-e2e-{secrets.token_hex(16)}"  # 39 characters: the mask shows the last four
    page, base = browser_page, asgi_server.url
    answers, frames = [], []
    page.on("response", lambda answer: answers.append(answer))
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(frame)))
    log_in(page, base)
    page.get_by_role("link", name="Team", exact=True).click()
    section = page.get_by_test_id("secrets")
    expect(section.get_by_text("No secrets")).to_be_visible()

    section.get_by_label("Secret name").fill("REWARD_TOKEN")
    section.get_by_label("Secret value").fill(value)
    expect(section.get_by_label("Secret value")).to_have_attribute("type", "password")
    section.get_by_role("button", name="Set secret").click()
    expect(section.get_by_role("status")).to_have_text("Secret “REWARD_TOKEN” set.")
    row = section.get_by_test_id("secrets-table").locator("tr", has_text="REWARD_TOKEN")
    expect(row).to_contain_text(f"••••{value[-4:]}")
    expect(row).to_contain_text("ada")  # who changed it
    expect(section.get_by_label("Secret value")).to_have_value("")  # not kept in the form
    assert orm(lambda: secrets_for_run(team_id=team.pk, names=["REWARD_TOKEN"])) == {
        "REWARD_TOKEN": value
    }  # what was typed is what the job would get

    # the server's refusal, on the field it names
    section.get_by_label("Secret name").fill("1bad")
    section.get_by_label("Secret value").fill("x")
    section.get_by_role("button", name="Set secret").click()
    expect(section.get_by_label("Secret name")).to_have_attribute("aria-invalid", "true")
    expect(section.locator(".field-error")).to_have_text(re.compile("^a letter, then letters"))

    # the audit log names it (never the value)
    expect(page.locator(".card", has_text="Audit log")).to_contain_text("secret.create")

    # the value is nowhere in the page, nor in any answer it was given (REST, websocket)
    assert value not in page.content()
    inputs = page.locator("input").evaluate_all("els => els.map((e) => e.value)")
    assert not any(value in v for v in inputs)
    read = 0
    for answer in answers:
        if answer.status == 204 or 300 <= answer.status < 400:
            continue  # no body
        assert value not in answer.body().decode("utf-8", "replace"), answer.url
        read += "/api/v1/teams/" in answer.url
    assert read >= 3  # the list before, the PUT's answer, the list after
    for frame in frames:
        assert value not in (frame if isinstance(frame, str) else frame.decode("utf-8", "replace"))

    # deleted, after a confirm
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(section.get_by_text("No secrets")).to_be_visible()
    assert not orm(lambda: TeamSecret.objects.filter(team=team).exists())

    # a viewer sees the names and masks, and no control
    page.get_by_label("Team").select_option(label="Vision · viewer")
    expect(section.get_by_test_id("secrets-table")).to_contain_text("VISION_KEY")
    expect(section.get_by_role("button")).to_have_count(0)
    expect(section.get_by_label("Secret value")).to_have_count(0)
