"""A stand-in for the Hugging Face Hub on a loopback port: what hf_hub_download asks of the real one, and nothing else.

HEAD and GET of /{repo}/resolve/{revision}/{filename}, answered with the headers huggingface_hub reads (X-Repo-Commit,
ETag, Content-Length) or with its error codes: 404 RepoNotFound, RevisionNotFound or EntryNotFound; for a gated
repository 401 GatedRepo without a token, 401 "Invalid credentials" for a token the Hub does not know, 403 GatedRepo
for a token not granted access. `stand_in_hub` (tests/conftest.py) points huggingface_hub at it with a fresh HF_HOME.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

GRANTED_TOKEN = "hf_granted"  # known to the stand-in and granted every gated repository
UNGRANTED_TOKEN = "hf_not_granted"  # known, granted none


@dataclass
class Repo:
    files: dict[str, bytes]
    gated: bool = False

    @property
    def commit(self) -> str:
        return hashlib.sha1(b"".join(sorted(self.files.values()))).hexdigest()


@dataclass
class StandInHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of each request
    delay_s: float = 0.0  # how long each answer waits
    server: ThreadingHTTPServer | None = None

    def add(self, repo_id: str, config: dict[str, Any] | bytes, *, total_size: int | None = None,
            gated: bool = False) -> Repo:
        files = {"config.json": config if isinstance(config, bytes) else json.dumps(config, indent=2).encode()}
        if total_size is not None:
            index = {"metadata": {"total_size": total_size}, "weight_map": {"lm_head.weight": "model.safetensors"}}
            files["model.safetensors.index.json"] = json.dumps(index).encode()
        self.repos[repo_id] = Repo(files, gated)
        return self.repos[repo_id]

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def downloads(self) -> list[str]:
        """The paths of the GET requests: what was downloaded."""
        return [path for method, path in self.requests if method == "GET"]

    def start(self) -> None:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:  # noqa: N802 (http.server's names)
                hub._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._answer(self, body=True)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # Polled every 20 ms for the shutdown at the test's end (the default, 0.5 s, is what each test would wait).
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def _answer(self, request: BaseHTTPRequestHandler, *, body: bool) -> None:
        self.requests.append((request.command, request.path))
        if self.delay_s:
            time.sleep(self.delay_s)
        status, headers, content = self._resolve(request)
        request.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(content))}.items():
            request.send_header(name, value)
        request.end_headers()
        if body:
            request.wfile.write(content)

    def _resolve(self, request: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        repo_id, _, rest = request.path.lstrip("/").partition("/resolve/")
        revision, _, filename = rest.partition("/")
        revision, filename = unquote(revision), unquote(filename.partition("?")[0])
        repo = self.repos.get(repo_id)
        if repo is None:
            return _error(404, "RepoNotFound", "Repository not found")
        if repo.gated:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if not token:
                return _error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to "
                                                "it and be authenticated to access it. Please log in.")
            if token not in (GRANTED_TOKEN, UNGRANTED_TOKEN):
                return _error(401, None, "Invalid credentials in Authorization header")
            if token != GRANTED_TOKEN:
                return _error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the "
                                                "authorized list.")
        if revision not in ("main", repo.commit):
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if filename not in repo.files:
            status, headers, content = _error(404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"")
            return status, {**headers, "X-Repo-Commit": repo.commit}, content
        content = repo.files[filename]
        return 200, {"X-Repo-Commit": repo.commit, "ETag": f'"{hashlib.sha1(content).hexdigest()}"',
                     "Content-Type": "application/json"}, content


def _error(status: int, code: str | None, message: str) -> tuple[int, dict[str, str], bytes]:
    headers = {"X-Error-Message": message, "Content-Type": "application/json"}
    if code is not None:
        headers["X-Error-Code"] = code
    return status, headers, json.dumps({"error": message}).encode()
