"""Run tokens: minted per dispatch, stored hashed, verified against their run."""

import pytest

from paddock.core.errors import DomainError
from paddock.experiments.models import Run, RunToken
from paddock.experiments.tokens import run_token_mint, run_token_verify, run_tokens_revoke
from paddock.teams.secrets import secret_hash


@pytest.fixture
def runs(launched):
    return [Run.objects.get(pk=r["id"]) for r in launched[0]["runs"]]


def test_mint_then_verify(runs):
    secret = run_token_mint(run=runs[0], dispatch=1)
    assert secret.startswith("pdr_")
    assert RunToken.objects.get(run=runs[0]).hashed == secret_hash(secret)
    assert run_token_verify(run_id=runs[0].pk, raw=secret).dispatch == 1


def test_a_token_is_good_for_its_run_only(runs):
    secret = run_token_mint(run=runs[0], dispatch=1)
    with pytest.raises(DomainError) as err:
        run_token_verify(run_id=runs[1].pk, raw=secret)
    assert (err.value.code, err.value.status) == ("token_invalid", 401)


def test_minting_again_for_a_dispatch_replaces_the_secret(runs):
    old = run_token_mint(run=runs[0], dispatch=1)
    new = run_token_mint(run=runs[0], dispatch=1)
    with pytest.raises(DomainError):
        run_token_verify(run_id=runs[0].pk, raw=old)
    assert run_token_verify(run_id=runs[0].pk, raw=new).dispatch == 1


def test_revoked_tokens_are_refused(runs):
    first = run_token_mint(run=runs[0], dispatch=1)
    second = run_token_mint(run=runs[0], dispatch=2)
    assert run_tokens_revoke(run_id=runs[0].pk, before_dispatch=2) == 1
    with pytest.raises(DomainError) as err:
        run_token_verify(run_id=runs[0].pk, raw=first)
    assert err.value.code == "token_revoked"
    assert run_token_verify(run_id=runs[0].pk, raw=second).dispatch == 2
