"""The planner page's server (`trainingcost serve`, issue 64) over HTTP: its answers equal the Python API's and the
command line's, it reads no path a visitor names, it keeps out whoever lacks the token, and its limits hold. The
page itself, in a real browser, is tests/test_page_browser.py."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

import trainingcost
from trainingcost.cli import main
from trainingcost.web import compute
from web_server import TOKEN, get, plan, served

README = {"preset": "llama-3-8b", "tokens": "1e12", "gpu": "h100-sxm", "gpus": "64",
          "rule": "bp,fa,dfa,pepita,mempepita"}


def cli(*args: str) -> subprocess.CompletedProcess:
    """The command line, in this process (as a reader's shell would run it; tests/test_cli.py runs it as a process)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as exc:  # argparse's refusals
            status = exc.code
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def flags(query: dict) -> list[str]:
    return [word for k, v in query.items() for word in ("--" + k.replace("_", "-"), v)]


@pytest.fixture(scope="module")
def server():
    with served("--workers", "2", "--time-limit", "600") as base:  # generous: the suite may run beside burners
        yield base


def test_the_page_and_its_answers_need_the_token(server):
    for path in ("/", "/page.js", "/api/options", "/api/plan"):
        status, _, body = get(server, path, README, token=None)
        assert status == 403 and body.count("\n") == 0 and "token" in body, (path, status, body)
        status, _, _ = get(server, path, README, token="wrong-" + TOKEN)
        assert status == 403
    # The printed address: the page, its style and script asked for with the token; no cookie (a cookie of
    # 127.0.0.1 reaches every port there, another user's server included)
    status, headers, body = get(server, "/", {"preset": "gpt2-small"})
    assert status == 200 and "set-cookie" not in {k.lower() for k in headers}
    assert f'src="/page.js?token={TOKEN}"' in body and f'href="/page.css?token={TOKEN}"' in body
    status, headers, body = get(server, "/page.js")
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"] and "fetch(" in body
    # the page's own requests: the token in a header
    request = urllib.request.Request(f"{server}/api/options", headers={"X-Trainingcost-Token": TOKEN})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200 and "set-cookie" not in {k.lower() for k in response.headers}
    wrong = urllib.request.Request(f"{server}/api/options", headers={"X-Trainingcost-Token": "wrong-" + TOKEN,
                                                                      "Cookie": f"trainingcost_token={TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(wrong, timeout=60)
    assert refused.value.code == 403  # a cookie is no credential


def test_the_readme_plan_equals_the_api_and_the_command_line_cell_for_cell(server):
    status, answer = plan(server, README)
    assert status == 200 and answer["ok"], answer
    api = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64,
                            rule=["bp", "fa", "dfa", "pepita", "mempepita"])
    assert answer["header"] == list(api.cells.columns) and answer["rows"] == api.cells.values.tolist()
    printed = cli("plan", *flags(README))
    assert printed.returncode == 0, printed.stderr
    assert answer["text"] == printed.stdout == api.text
    for row in answer["rows"]:  # each row of the page's table is a line of the printed table, cell for cell
        assert any(re.split(r"\s{2,}", line.strip()) == row for line in printed.stdout.splitlines()), row
    assert answer["cli"] == "trainingcost plan " + " ".join(flags(README))
    assert "rule=['bp', 'fa', 'dfa', 'pepita', 'mempepita']" in answer["python"] and "tokens=1e12" in answer["python"]
    namespace = {}
    exec(answer["python"].replace("print(result.text)", ""), namespace)  # the Python call shown runs as written
    assert namespace["result"].cells.equals(api.cells)
    memory = {r["rule"]: r for r in answer["memory"]["rows"]}
    for _, row in api.memory.iterrows():
        assert memory[row["rule"]]["total"] == row["mem_total"]
        assert sum(memory[row["rule"]]["parts"]) == pytest.approx(row["mem_total"], rel=1e-12)
    assert answer["memory"]["capacity"] == api.table["memory_capacity"].iloc[0] == 80e9
    assert dict(answer["assumptions"])["peak FLOP/s"].startswith("NVIDIA H100")


def test_a_lora_plan_on_the_page_equals_the_command_line(server):
    query = {**README, "rule": "bp", "finetune": "qlora", "lora_rank": "16", "lora_targets": "all", "gpus": "1",
             "tokens": "1e8"}
    status, answer = plan(server, query)
    assert status == 200 and answer["ok"], answer
    printed = cli("plan", *flags(query))
    assert printed.returncode == 0, printed.stderr
    assert answer["text"] == printed.stdout and "Trains: qlora: rank-16 adapters" in answer["text"]


def test_downloads_equal_the_command_lines_csv_and_json(server):
    status, headers, body = get(server, "/api/plan.csv", README)
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert 'filename="plan.csv"' in headers["content-disposition"]
    assert body == cli("plan", *flags(README), "--format", "csv").stdout
    status, _, body = get(server, "/api/plan.json", README)
    assert status == 200
    assert json.loads(body) == json.loads(cli("plan", *flags(README), "--format", "json").stdout)


QUERIES = [
    {"preset": "gpt2-small", "tokens": "1e10", "gpu": "a100-80gb", "gpus": "8"},
    {"preset": "llama-2-7b", "tokens": "2e12", "gpu": "h100-sxm", "gpus": "32-128x2", "layout": "search",
     "rule": "bp,dfa"},
    {"preset": "mistral-7b", "chinchilla": "true", "gpu": "h200", "gpus": "16", "rule": "pepita"},
    {"preset": "bert-base", "tokens": "3e9", "gpu": "v100", "gpus": "4", "precision": "fp16-mixed"},
    {"preset": "qwen2.5-0.5b", "tokens": "5e10", "cluster": "dgx-h100", "gpus": "64", "price": "2.5",
     "rule": "bp,fa,kp"},
    {"preset": "mixtral-8x7b", "tokens": "1e12", "gpu": "h100-sxm", "gpus": "256", "ep": "8", "rule": "bp"},
]


def keywords(query: dict) -> dict:
    return {k: (v == "true" if k == "chinchilla" else v) for k, v in query.items()}


def test_concurrent_visitors_each_get_their_own_answer(server):
    """Six different plans asked at once (two computed at a time): each answer is the API's for its own query."""
    with ThreadPoolExecutor(len(QUERIES)) as pool:
        answers = list(pool.map(lambda q: plan(server, q), QUERIES * 2))
    for query, (status, answer) in zip(QUERIES * 2, answers):
        assert status == 200 and answer["ok"], (query, answer)
        expected = trainingcost.plan(**keywords(query))
        assert answer["rows"] == expected.cells.values.tolist(), query
        assert answer["text"] == expected.text


@pytest.mark.parametrize("query, field", [
    ({**README, "gpus": "0"}, "gpus"),
    ({**README, "gpu": "h100"}, "gpu"),
    ({**README, "rule": "bp,sgd"}, "rule"),
    ({**README, "tokens": "lots"}, "tokens"),
    ({**README, "layout": "best"}, "layout"),
    ({**README, "tp": "3"}, None),
    ({**README, "finetune": "lora", "lora_targets": "q,x"}, "lora_targets"),
    ({**README, "finetune": "lora"}, "rule"),
])
def test_a_bad_value_gets_the_command_lines_one_line_and_its_field(server, query, field):
    status, answer = plan(server, query)
    assert status == 422 and not answer["ok"], answer
    printed = cli("plan", *flags(query))
    assert printed.returncode == 2
    assert answer["error"] == printed.stderr.strip() and "\n" not in answer["error"]
    assert len(answer["error"]) <= 200 and "Traceback" not in answer["error"]
    if field:
        assert answer["field"] == field


@pytest.mark.parametrize("query", [
    {**README, "hardware": "/etc/passwd"},
    {**README, "calibration": "/etc/passwd"},
    {**README, "frontiers": "results/tables/frontiers.parquet", "target_loss": "3"},
    {**README, "figure": "/tmp/x.png", "gpus": "8,16"},
    {"hf_config": "/etc/passwd", "tokens": "1e9", "gpu": "h100-sxm"},
    {"hf_config": "../../config.json", "tokens": "1e9", "gpu": "h100-sxm"},
    {"hf_config": "tests", "tokens": "1e9", "gpu": "h100-sxm"},
])
def test_no_path_on_the_server_is_read(server, query):
    status, answer = plan(server, query)
    assert status == 422 and not answer["ok"] and "\n" not in answer["error"]
    assert "server" in answer["error"], answer["error"]
    assert "root:" not in json.dumps(answer)


def test_a_pasted_model_and_device_equal_the_files(server, tmp_path):
    model = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
             "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
             "max_position_embeddings": 2048, "tie_word_embeddings": False}
    device = {"name": "lab-gpu", "label": "a lab GPU", "peak_tflops": {"fp32": 60, "tf32": 400, "bf16": 800,
              "fp16": 800, "fp8": None}, "memory_gb": 96, "bandwidth_gbs": 3000, "power_w": 600,
              "source": "our own measurement"}
    query = {"hf_config": json.dumps(model), "tokens": "1e10", "gpu": json.dumps(device), "gpus": "8",
             "rule": "bp,dfa"}
    status, answer = plan(server, query)
    assert status == 200 and answer["ok"], answer
    (tmp_path / "config.json").write_text(json.dumps(model))
    name = device.pop("name")
    (tmp_path / "devices.json").write_text(json.dumps({name: device}))
    printed = cli("plan", "--hf-config", str(tmp_path / "config.json"), "--tokens", "1e10", "--hardware",
                  str(tmp_path / "devices.json"), "--gpu", name, "--gpus", "8", "--rule", "bp,dfa")
    assert printed.returncode == 0, printed.stderr
    assert answer["text"] == printed.stdout
    assert answer["cli"].startswith("trainingcost plan --hf-config config.json") and "--hardware device.json --gpu lab-gpu" \
        in answer["cli"]


def test_requests_over_the_size_limit_and_unknown_inputs_get_one_line(server):
    status, _, body = get(server, "/api/plan", {**README, "hf_config": "{" + " " * 20_000 + "}"})
    assert status in (413, 431) and "\n" not in body.strip()
    status, answer = plan(server, {**README, "gpux": "8"})
    assert status == 422 and "'gpux' is not an input of the page (closest: gpu, gpus)" in answer["error"]


def test_a_search_past_the_time_limit_is_one_line_and_the_server_lives_on():
    with served("--time-limit", "0.3", "--workers", "1") as base:
        status, answer = plan(base, {"preset": "llama-2-70b", "tokens": "2e12", "gpu": "h100-sxm",
                                     "gpus": "64-16384x2", "layout": "search"})
        assert status == 504 and "longer than 0.3 s" in answer["error"] and "\n" not in answer["error"]
        status, answer = plan(base, {"preset": "gpt2-small", "tokens": "1e9", "gpu": "a100-80gb"})
        assert status in (200, 504)  # the next query gets its own process: answered, or timed out on a slow machine


def test_the_page_fields_are_the_apis_keywords_without_the_server_files():
    names = set(compute.fields())
    assert names <= set(trainingcost.plan.__kwdefaults__)
    assert not names & set(compute.SERVER_FILES)
    assert {"preset", "hf_config", "tokens", "chinchilla", "gpu", "gpus", "framework", "cluster", "precision", "rule",
            "layout", "objective", "tp", "pp"} <= names


def test_serve_refuses_a_bad_flag_and_a_used_port_in_one_line():
    with served() as base:
        port = base.rsplit(":", 1)[1]
        taken = cli("serve", "--port", port)
        assert taken.returncode == 2 and taken.stderr.count("\n") == 1
        assert taken.stderr.startswith(f"trainingcost serve: error: --port: cannot listen on 127.0.0.1:{port}")
    for args, word in ((["--port", "70000"], "--port"), (["--token", "short"], "--token"),
                       (["--time-limit", "0"], "--time-limit"), (["--host", "192.0.2.1"], "--host")):
        out = cli("serve", "--port", "0", *args) if "--port" not in args else cli("serve", *args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and word in out.stderr, (args, out.stderr)


def test_the_table_of_a_range_is_the_searchs_table():
    query = {"preset": "llama-3-8b", "tokens": "1e12", "gpu": "h100-sxm", "gpus": "64-256x2", "layout": "search",
             "rule": "bp,dfa"}
    answer = compute.answer(query)
    assert answer["header"][:3] == ["rule", "GPUs", "layout"]
    assert len(answer["rows"]) == 6 and sum(row[1].endswith("*") for row in answer["rows"]) == 2
    assert {p["gpus"] for p in answer["scaling"]} == {64, 128, 256}
    table = pd.DataFrame(answer["scaling"])
    api = trainingcost.plan(**query).table
    assert table["gpu_hours"].tolist() == api.drop_duplicates(["rule", "gpus"])["gpu_hours"].tolist()


def test_a_hub_name_is_fetched_through_the_hub_cache_and_its_failure_is_the_command_lines_line(tmp_path, monkeypatch):
    """A Hub name that is also a folder beside the server is still a Hub name (no server path is read); offline and
    uncached, the one line is the command line's."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    (tmp_path / "meta-llama" / "Llama-3.1-8B").mkdir(parents=True)
    (tmp_path / "meta-llama" / "Llama-3.1-8B" / "config.json").write_text('{"model_type": "gpt2"}')
    monkeypatch.chdir(tmp_path)
    answer = compute.answer({"hf_config": "meta-llama/Llama-3.1-8B", "tokens": "1e12", "gpu": "h100-sxm"})
    assert not answer["ok"] and answer["field"] == "hf_config"
    assert answer["error"].startswith("trainingcost plan: error: --hf-config: meta-llama/Llama-3.1-8B: ")
    assert "HF_HUB_OFFLINE" in answer["error"] and "\n" not in answer["error"]
