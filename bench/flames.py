"""Flame graphs of elicitd's hot path under load: ``python bench/flames.py [--seconds 10]``.

Starts one elicitd server (as ``bench/run.py`` does, same backends and setup), drives one target at
a time with wrk (32 connections) and records the server process with ``py-spy record`` meanwhile.
Each target leaves ``bench/profiles/<label>-<target>.svg`` (the flame graph) and
``bench/profiles/<label>-<target>.txt`` (py-spy's collapsed stacks, sorted by sample count, for
reading and diffing without a browser). Needs ``py-spy`` (see bench/README.md) and ``wrk``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.harness import DATA, Generator, Server, Target, backends, raise_nofile, server_env
from bench.run import SUBJECT, TOKEN_PROVIDER, TOKEN_SUB, create_external, make_client, make_connection
from service.settings import KeyRing

PROFILES = Path(__file__).resolve().parent / "profiles"


def summarize(raw: Path, out: Path, top: int = 60) -> None:
    """Collapsed stacks → the functions with the most samples, inclusive and self."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        total += count
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    lines = [f"samples: {total}", "", "inclusive % | function (file:line)"]
    lines += [f"{100 * n / total:6.1f} | {frame}" for frame, n in inclusive.most_common(top)]
    lines += ["", "self % | function (file:line)"]
    lines += [f"{100 * n / total:6.1f} | {frame}" for frame, n in own.most_common(top)]
    out.write_text("\n".join(lines) + "\n")


def _record(command: list[str], stem: Path) -> None:
    time.sleep(0.5)
    for extra in (["-o", f"{stem}.svg"], ["--format", "raw", "-o", f"{stem}.raw"]):
        subprocess.run([*command, *extra], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="before", help="file name prefix: before, after, …")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--targets", default="status,resolve,token,create")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    PROFILES.mkdir(exist_ok=True)
    raise_nofile()
    (DATA / "logs").mkdir(parents=True, exist_ok=True)
    keys = KeyRing.generate_entry("bench1")
    with backends() as found:
        api_key, client_id = asyncio.run(make_client(found.database_url))
        asyncio.run(make_connection(found.database_url, keys, client_id))
        env = server_env(found, keys, "elicitd:bench:" + secrets.token_hex(4))
        app = Server("elicitd-profile", "elicitd_factory:create", env).start()
        try:
            auth = f"Bearer {api_key}"
            with httpx.Client(base_url=app.url, headers={"Authorization": auth}, timeout=30) as http:
                created = create_external(http, "profile")
                flow_id = created["flow"]["id"]
                http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}}).raise_for_status()
            resolve_body = json.dumps(
                {
                    "subject": SUBJECT | {"sub": "profile"},
                    "request_state": created["mcp"]["requestState"],
                    "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
                }
            )
            query = urlencode({"iss": SUBJECT["iss"], "sub": TOKEN_SUB})
            json_type = "Content-Type: application/json"
            create_body = json.dumps(
                {"subject": {"iss": SUBJECT["iss"], "sub": "p-{n}"}, "kind": "external", "url": "https://x.example/s"}
            )
            every = {
                "status": Target("status", f"{app.url}/v1/flows/{flow_id}", headers=(f"Authorization: {auth}",)),
                "resolve": Target(
                    "resolve",
                    f"{app.url}/v1/flows/resolve",
                    "POST",
                    (f"Authorization: {auth}", json_type),
                    resolve_body,
                ),
                "token": Target(
                    "token",
                    f"{app.url}/v1/connections/{TOKEN_PROVIDER}/token?{query}",
                    headers=(f"Authorization: {auth}",),
                ),
                "create": Target(
                    "create", f"{app.url}/v1/flows", "POST", (f"Authorization: {auth}", json_type), create_body, True
                ),
            }
            gen = Generator.choose("wrk", 32)
            assert app.process is not None
            for name in args.targets.split(","):
                target = every[name]
                gen.run(target, 2)  # warm up
                stem = PROFILES / f"{args.label}-{name}"
                # Two recordings one after the other under the same load (py-spy writes one format
                # per run, and two samplers cannot both pause the process): the flame graph, then
                # the collapsed stacks the text summary is made from.
                base = [spy, "record", "--pid", str(app.process.pid), "--duration", str(int(args.seconds))]
                base += ["--rate", "200"]

                recorder = threading.Thread(target=_record, args=(base, stem))
                recorder.start()
                result = gen.run(target, 2 * args.seconds + 2)
                recorder.join()
                raw = Path(f"{stem}.raw")
                summarize(raw, Path(f"{stem}.txt"))
                raw.unlink()
                print(f"[profile] {name}: {result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms -> {stem}.svg")
        finally:
            app.stop()


if __name__ == "__main__":
    main()
