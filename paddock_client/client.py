"""A thin Python client of the Paddock REST API (/api/v1/).

Needs `requests` only: importable without Django and without torch, so scripts, notebooks
and the `paddock` CLI can drive a platform from anywhere.

    client = PaddockClient("http://127.0.0.1:8000", token="pdk_…")
    launched = client.launch(team=1, name="kl sweep", spec={"train": {"steps": 20}},
                             backends=["torch", "vllm"], seeds=2)
    for event in client.follow_events(launched["runs"][0]["id"]):
        print(event["message"])

Errors come back as `PaddockAPIError` carrying the API's `code`, `message` and `field`.
Transfers (dataset upload, checkpoint and export download) take an optional `progress`
callback, called with (bytes so far, total bytes or None).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from paddock_client.transfer import MultipartFile, adapter_extract, save_stream
from workers.names import TERMINAL_RUN_STATES  # standard library only

Progress = Callable[[int, int | None], None]


def credentials_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "paddock" / "credentials.json"


class PaddockAPIError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        self.status, self.code, self.message, self.field = status, code, message, field
        where = f" ({field})" if field else ""
        super().__init__(f"{status} {code}{where}: {message}")


def _raise_for(reply: requests.Response) -> None:
    if reply.status_code < 400:
        return
    try:
        body = reply.json()
    except ValueError:
        body = {"code": "http_error", "message": reply.text[:500]}
    if not isinstance(body, dict):
        body = {"code": "http_error", "message": str(body)[:500]}
    raise PaddockAPIError(
        reply.status_code, body.get("code", "error"), body.get("message", ""), body.get("field")
    )


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

    def _url(self, path: str) -> str:
        return path if path.startswith("http") else f"{self.url}/api/v1/{path.lstrip('/')}"

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", self.timeout)
        reply = self.session.request(method, self._url(path), **kwargs)
        _raise_for(reply)
        if reply.status_code == 204 or not reply.content:
            return None
        return reply.json()

    def _pages(self, path: str, params: dict | None = None) -> Iterator[dict]:
        params = {k: v for k, v in (params or {}).items() if v is not None and v != ""}
        page = self.request("GET", path, params=params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])

    def _download(
        self, path: str, params: dict | None = None
    ) -> tuple[requests.Response, str | None, int | None]:
        """An open streamed reply, its file name (Content-Disposition) and its length."""
        reply = self.session.get(self._url(path), params=params, stream=True, timeout=self.timeout)
        try:
            _raise_for(reply)
        except PaddockAPIError:
            reply.close()
            raise
        disposition = reply.headers.get("Content-Disposition", "")
        name = disposition.partition('filename="')[2].rstrip('"') or None
        length = reply.headers.get("Content-Length")
        return reply, name, int(length) if length else None

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
        preflight: str = "off",
    ) -> dict:
        """{"experiment", "runs"}; with validate_only, {"valid", "errors", "runs"}.
        `preflight`: `first` (a pre-flight check the runs wait for) or `only`."""
        payload: dict[str, Any] = {
            "team": self.team_id(team), "name": name, "spec": spec, "seeds": seeds,
            "tags": tags or [], "description": description, "validate_only": validate_only,
            "preflight": preflight,
        }  # fmt: skip
        if backends:
            payload["backends"] = backends
        if cluster is not None:
            payload["cluster"] = cluster
        return self.request("POST", "experiments", json=payload)

    def clone(self, experiment_id: int, *, edits: dict | None = None, **fields: Any) -> dict:
        """Launch a copy of an experiment with `edits` (dotted path → value); fields are
        the clone body's others (name, backends, seeds, config, validate_only, …)."""
        fields = {k: v for k, v in fields.items() if v is not None}
        return self.request(
            "POST", f"experiments/{experiment_id}/clone", json={"edits": edits or {}, **fields}
        )

    def sweep_create(self, *, team: int | str | None, **fields: Any) -> dict:
        """A sweep (POST /sweeps: name, spec, method, params, budget, parallel, metric,
        mode, early_stopping, seed, cluster, validate_only; docs/sweeps.md); its detail, or
        with validate_only {"valid", "errors", "members", "parallel"}."""
        body = {"team": self.team_id(team), **{k: v for k, v in fields.items() if v is not None}}
        return self.request("POST", "sweeps", json=body)

    def sweeps(self, team: int | None = None) -> Iterator[dict]:
        """Sweeps, newest first, across pages."""
        return self._pages("sweeps", {"team": team})

    def sweep(self, sweep_id: int) -> dict:
        """One sweep with its members."""
        return self.request("GET", f"sweeps/{sweep_id}")

    def sweep_stop(self, sweep_id: int) -> dict:
        return self.request("POST", f"sweeps/{sweep_id}/stop")

    def experiments(self, **filters: Any) -> Iterator[dict]:
        """Experiments matching team, tag, creator, search; newest first, across pages."""
        return self._pages("experiments", filters)

    def experiment(self, experiment_id: int) -> dict:
        return self.request("GET", f"experiments/{experiment_id}")

    def preflight(self, experiment_id: int) -> dict:
        """The experiment's pre-flight check: {"state", "runs": [{…, "verdict"}]}."""
        return self.request("GET", f"experiments/{experiment_id}/preflight")

    def preflight_override(self, experiment_id: int) -> dict:
        """Launch the runs the experiment's pre-flight check holds."""
        return self.request("POST", f"experiments/{experiment_id}/preflight/override")

    def config(self, config_id: int) -> dict:
        return self.request("GET", f"configs/{config_id}")

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
            if not follow or self.run(run_id)["state"] in TERMINAL_RUN_STATES:
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
        """What changed from config version a to b: [{"path", "a", "b"}, …]."""
        return self.request("GET", "configs/diff", params={"a": config_a, "b": config_b})["changes"]

    # --- checkpoints -----------------------------------------------------------------------

    def checkpoints(self, run_id: int) -> list[dict]:
        return self.request("GET", f"runs/{run_id}/checkpoints")

    def download_checkpoint(
        self, run_id: int, checkpoint_id: int, dest: Path, progress: Progress | None = None
    ) -> Path:
        """Stream a checkpoint as the server sends it (a directory arrives as a tar) to
        `dest`: into it if it is a directory (the server's file name kept), else to it."""
        reply, name, size = self._download(f"runs/{run_id}/checkpoints/{checkpoint_id}/download")
        with reply:
            target = dest / (name or f"checkpoint-{checkpoint_id}") if dest.is_dir() else dest
            save_stream(reply.iter_content(1024 * 1024), target, size, progress)
        return target

    def download_adapter(
        self, run_id: int, checkpoint_id: int, dest: Path, progress: Progress | None = None
    ) -> Path:
        """The checkpoint's LoRA adapter alone, unpacked into the directory `dest`
        (adapter_config.json + adapter_model.safetensors): what `peft.PeftModel
        .from_pretrained(base, dest)` and vLLM's LoRARequest load as it is."""
        reply, _, size = self._download(
            f"runs/{run_id}/checkpoints/{checkpoint_id}/download", params={"part": "adapter"}
        )
        with reply:
            return adapter_extract(reply.iter_content(1024 * 1024), dest, size, progress)

    def export_metrics(
        self, run_id: int, dest: Path, *, format: str = "csv", keys: list[str] | None = None,
        progress: Progress | None = None,
    ) -> Path:  # fmt: skip
        """Every stored point of the run (full resolution, no downsampling) as CSV or
        Parquet (columns step, key, value, time), streamed to `dest`."""
        params = {"format": format, **({"keys": ",".join(keys)} if keys else {})}
        reply, _, size = self._download(f"runs/{run_id}/metrics/export", params=params)
        with reply:
            save_stream(reply.iter_content(1024 * 1024), dest, size, progress)
        return dest

    # --- datasets --------------------------------------------------------------------------

    def datasets(self, **filters: Any) -> Iterator[dict]:
        return self._pages("datasets", filters)

    def upload_dataset(
        self, path: Path, *, team: int | str | None, name: str | None = None,
        progress: Progress | None = None,
    ) -> dict:  # fmt: skip
        """Upload a JSONL or Parquet file (streamed from disk, with its length sent)."""
        fields = {"team": str(self.team_id(team)), "name": name or path.name}
        with MultipartFile(fields, "file", path, progress) as body:
            return self.request(
                "POST", "datasets", data=body, headers={"Content-Type": body.content_type},
                timeout=max(self.timeout, 600),
            )  # fmt: skip

    # --- tokens and clusters ---------------------------------------------------------------

    def tokens(self, team: int | str | None) -> list[dict]:
        return self.request("GET", f"teams/{self.team_id(team)}/tokens")

    def create_token(
        self, team: int | str | None, name: str, expires_at: str | None = None
    ) -> dict:
        body = {"name": name, **({"expires_at": expires_at} if expires_at else {})}
        return self.request("POST", f"teams/{self.team_id(team)}/tokens", json=body)

    def revoke_token(self, team: int | str | None, token_id: int) -> dict:
        return self.request("DELETE", f"teams/{self.team_id(team)}/tokens/{token_id}")

    def secrets(self, team: int | str | None) -> list[dict]:
        """The team's secrets, masked (names and when they changed; never a value)."""
        return self.request("GET", f"teams/{self.team_id(team)}/secrets")

    def set_secret(self, team: int | str | None, name: str, value: str) -> dict:
        """Create or replace a team secret (team admins): write-only."""
        path = f"teams/{self.team_id(team)}/secrets/{quote(name, safe='')}"
        return self.request("PUT", path, json={"value": value})

    def delete_secret(self, team: int | str | None, name: str) -> None:
        self.request("DELETE", f"teams/{self.team_id(team)}/secrets/{quote(name, safe='')}")

    def clusters(self) -> list[dict]:
        return self.request("GET", "clusters")

    def cluster(self, cluster_id: int) -> dict:
        return self.request("GET", f"clusters/{cluster_id}")

    def register_cluster(self, **fields: Any) -> dict:
        """name, address, team (None: shared, staff only), dashboard_url, backends,
        capacity, labels."""
        body = {k: v for k, v in fields.items() if v is not None}
        if "team" in body:
            body["team"] = self.team_id(body["team"])
        return self.request("POST", "clusters", json=body)

    def cluster_health(self, cluster_id: int) -> dict:
        """Check the cluster's Jobs API now; the cluster with what the check found."""
        return self.request("POST", f"clusters/{cluster_id}/health")
