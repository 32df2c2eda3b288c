"""A thin Python client of the Paddock REST API (/api/v1/).

Needs `requests` only: importable without Django and without torch, so scripts, notebooks
and the `paddock` CLI verbs can drive a platform from anywhere.

    client = PaddockClient("http://127.0.0.1:8000", token="pdk_…")
    launched = client.launch(team=1, name="kl sweep", spec={"train": {"steps": 20}},
                             backends=["torch", "vllm"], seeds=2)
    for event in client.follow_events(launched["runs"][0]["id"]):
        print(event["message"])

Errors come back as `PaddockAPIError` carrying the API's `code`, `message` and `field`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

FINISHED = {"succeeded", "aborted", "failed"}


def credentials_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "paddock" / "credentials.json"


class PaddockAPIError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        self.status, self.code, self.message, self.field = status, code, message, field
        where = f" ({field})" if field else ""
        super().__init__(f"{status} {code}{where}: {message}")


class PaddockClient:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["User-Agent"] = "paddock-client"

    # --- credentials -------------------------------------------------------------------

    @classmethod
    def from_environment(cls, path: Path | None = None) -> PaddockClient:
        """PADDOCK_URL + PADDOCK_TOKEN, or what `paddock login` saved."""
        url, token = os.environ.get("PADDOCK_URL"), os.environ.get("PADDOCK_TOKEN")
        if not (url and token):
            path = path or credentials_path()
            if not path.is_file():
                raise PaddockAPIError(
                    401, "not_logged_in", "run `paddock login` or set PADDOCK_URL/PADDOCK_TOKEN"
                )
            saved = json.loads(path.read_text())
            url, token = url or saved["url"], token or saved["token"]
        return cls(url, token)

    def save_credentials(self, path: Path | None = None) -> Path:
        """Write url and token for later commands, readable by the owner only."""
        path = path or credentials_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        token = self.session.headers["Authorization"].removeprefix("Bearer ")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": self.url, "token": token}, fh)
        return path

    # --- transport -----------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        url = path if path.startswith("http") else f"{self.url}/api/v1/{path.lstrip('/')}"
        reply = self.session.request(method, url, timeout=self.timeout, **kwargs)
        if reply.status_code >= 400:
            try:
                body = reply.json()
            except ValueError:
                body = {"code": "http_error", "message": reply.text[:500]}
            raise PaddockAPIError(
                reply.status_code, body.get("code", "error"), body.get("message", ""),
                body.get("field"),
            )  # fmt: skip
        if reply.status_code == 204 or not reply.content:
            return None
        return reply.json()

    def _pages(self, path: str, params: dict | None = None) -> Iterator[dict]:
        page = self.request("GET", path, params={k: v for k, v in (params or {}).items() if v})
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])

    # --- who and where ---------------------------------------------------------------------

    def me(self) -> dict:
        return self.request("GET", "me")

    def teams(self) -> list[dict]:
        return self.request("GET", "teams")

    def team_id(self, team: int | str | None = None) -> int:
        """A team id from an id, a slug, or (None) the caller's only team."""
        if isinstance(team, int) or (isinstance(team, str) and team.isdigit()):
            return int(team)
        teams = self.teams()
        if team is None:
            if len(teams) != 1:
                slugs = ", ".join(t["slug"] for t in teams) or "none"
                raise PaddockAPIError(400, "team_required", f"name a team ({slugs})", "team")
            return teams[0]["id"]
        for t in teams:
            if t["slug"] == team:
                return t["id"]
        raise PaddockAPIError(404, "not_found", f"no team '{team}' of yours", "team")

    # --- experiments and runs --------------------------------------------------------------

    def launch(
        self,
        *,
        team: int | str | None,
        name: str,
        spec: dict,
        backends: list[str] | None = None,
        seeds: int = 1,
        tags: list[str] | None = None,
        description: str = "",
        cluster: int | None = None,
        validate_only: bool = False,
    ) -> dict:
        """{"experiment", "runs"}; with validate_only, {"valid", "errors", "runs"}."""
        payload: dict[str, Any] = {
            "team": self.team_id(team), "name": name, "spec": spec, "seeds": seeds,
            "tags": tags or [], "description": description, "validate_only": validate_only,
        }  # fmt: skip
        if backends:
            payload["backends"] = backends
        if cluster is not None:
            payload["cluster"] = cluster
        return self.request("POST", "experiments", json=payload)

    def clone(self, experiment_id: int, *, edits: dict | None = None, **fields: Any) -> dict:
        return self.request(
            "POST", f"experiments/{experiment_id}/clone", json={"edits": edits or {}, **fields}
        )

    def experiments(self, **filters: Any) -> Iterator[dict]:
        return self._pages("experiments", filters)

    def runs(self, **filters: Any) -> Iterator[dict]:
        """Every run matching state (`"running"` or `"queued,running"`), backend, tag,
        creator, experiment, team; newest first, across pages."""
        return self._pages("runs", filters)

    def run(self, run_id: int) -> dict:
        return self.request("GET", f"runs/{run_id}")

    def pause(self, run_id: int) -> dict:
        return self.request("POST", f"runs/{run_id}/pause")

    def resume(self, run_id: int) -> dict:
        return self.request("POST", f"runs/{run_id}/resume")

    def abort(self, run_id: int) -> dict:
        return self.request("POST", f"runs/{run_id}/abort")

    def events(self, run_id: int, *, after: int = 0, kind: str | None = None) -> dict:
        params = {"after": after, **({"kind": kind} if kind else {})}
        return self.request("GET", f"runs/{run_id}/events", params=params)

    def follow_events(
        self, run_id: int, *, after: int = 0, poll_s: float = 1.0, follow: bool = True
    ) -> Iterator[dict]:
        """Events oldest first; with `follow`, keep polling until the run has finished."""
        while True:
            page = self.events(run_id, after=after)
            yield from page["results"]
            after = page["last_id"]
            if page["results"]:
                continue
            if not follow or self.run(run_id)["state"] in FINISHED:
                # one last look: events stored between the two requests
                yield from self.events(run_id, after=after)["results"]
                return
            time.sleep(poll_s)

    def metrics(
        self, run_id: int, keys: list[str] | None = None, *, max_points: int = 1000,
        x: str = "step",
    ) -> dict:  # fmt: skip
        params: dict[str, Any] = {"max_points": max_points, "x": x}
        if keys:
            params["keys"] = ",".join(keys)
        return self.request("GET", f"runs/{run_id}/metrics", params=params)

    def compare(
        self, run_ids: list[int], keys: list[str], *, max_points: int = 1000, x: str = "step"
    ) -> dict:
        params = {"runs": ",".join(map(str, run_ids)), "keys": ",".join(keys),
                  "max_points": max_points, "x": x}  # fmt: skip
        return self.request("GET", "metrics", params=params)

    def diff(self, config_a: int, config_b: int) -> list[dict]:
        return self.request("GET", "configs/diff", params={"a": config_a, "b": config_b})["changes"]

    def checkpoints(self, run_id: int) -> list[dict]:
        return self.request("GET", f"runs/{run_id}/checkpoints")

    def download_checkpoint(self, run_id: int, checkpoint_id: int, dest: Path) -> Path:
        """Stream a checkpoint to `dest` (a directory: the server's file name is kept)."""
        url = f"{self.url}/api/v1/runs/{run_id}/checkpoints/{checkpoint_id}/download"
        with self.session.get(url, stream=True, timeout=self.timeout) as reply:
            if reply.status_code >= 400:
                body = reply.json()
                raise PaddockAPIError(reply.status_code, body["code"], body["message"])
            disposition = reply.headers.get("Content-Disposition", "")
            name = disposition.partition('filename="')[2].rstrip('"') or f"checkpoint-{run_id}"
            target = dest / name if dest.is_dir() else dest
            with open(target, "wb") as fh:
                for chunk in reply.iter_content(1024 * 1024):
                    fh.write(chunk)
        return target

    def create_token(self, team: int | str | None, name: str) -> dict:
        return self.request("POST", f"teams/{self.team_id(team)}/tokens", json={"name": name})
