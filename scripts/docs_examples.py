#!/usr/bin/env python3
"""Runs the examples of README.md and the book (docs/src) against a real server.

Every fenced block tagged `sh`, `bash` or `python` is run, page by page in the book's order
(README first, then docs/src/SUMMARY.md's), the blocks of a page in order in one bash process
(so a variable set in one block is there in the next; a Python block runs on its own with the
shell's environment at that point). A block followed by an `output` block must print that
output on its standard output (trailing spaces ignored; `...` in an expected line matches any
text). A block whose
fence says `skip=REASON` is not run and is listed with its reason.

The server is started as scripts/run.sh starts it: the binary at $INFERGATE_BIN (default
target/debug/infergate), a fresh data directory, the demo models, plugins and pipelines that
run.sh registers, TLS with the generated self-signed certificate. Each page runs in a directory
of its own with the variables the book's "About the examples" section lists.

A failure names the page and line (`docs/src/models.md:42: ...`) and shows the block's output.
Exit status: 0 when every example passed, 1 otherwise.

Usage: docs_examples.py [--page PATH]... [--keep] [--timeout SECONDS]
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import queue
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNABLE = {"sh", "bash", "python"}
FENCE = re.compile(r"^(`{3,})(.*)$")


class Block:
    def __init__(self, page, line, end, lang, attrs, text):
        self.page, self.line, self.end, self.lang, self.attrs, self.text = (
            page, line, end, lang, attrs, text)
        self.expected = None      # the `output` block that follows, if any

    @property
    def skip(self):
        return self.attrs.get("skip")

    def where(self, line=None):
        return f"{os.path.relpath(self.page, ROOT)}:{line or self.line}"


def parse(page):
    """The page's fenced blocks; `line` is the fence's line (1-based), `end` the closing one."""
    blocks, lines = [], open(page, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        words = info.replace(",", " ").split()
        lang = words[0] if words else ""
        attrs = dict(w.split("=", 1) if "=" in w else (w, "") for w in words[1:])
        j = i + 1
        while j < len(lines) and not re.match(rf"^{fence}`*\s*$", lines[j]):
            j += 1
        if j == len(lines):
            raise SystemExit(f"{os.path.relpath(page, ROOT)}:{i + 1}: fence never closed")
        blocks.append(Block(page, i + 1, j + 1, lang, attrs, "\n".join(lines[i + 1:j])))
        i = j + 1
    last = None
    for b in blocks:
        if b.lang in RUNNABLE:
            last = b
        elif b.lang == "output":
            if last is None or last.expected is not None:
                raise SystemExit(f"{b.where()}: an output block without a runnable block before it")
            last.expected = b
    return blocks


def pages():
    """README.md, then the book's pages in SUMMARY.md's order, then any page it does not list."""
    src = os.path.join(ROOT, "docs", "src")
    order = [os.path.join(ROOT, "README.md")]
    summary = open(os.path.join(src, "SUMMARY.md"), encoding="utf-8").read()
    for link in re.findall(r"\]\(([^)#]+\.md)\)", summary):
        path = os.path.normpath(os.path.join(src, link))
        if path not in order and os.path.exists(path):
            order.append(path)
    for path in sorted(glob.glob(os.path.join(src, "**", "*.md"), recursive=True)):
        if path not in order and not path.endswith("SUMMARY.md"):
            order.append(path)
    return order


def run_sh_demo():
    """The models, plugins and pipelines scripts/run.sh registers, read from run.sh itself."""
    text = open(os.path.join(ROOT, "scripts", "run.sh"), encoding="utf-8").read()
    models = re.search(r"<<'MODELS'\n(.*?)\nMODELS", text, re.S).group(1)
    models = [line.split() for line in models.splitlines() if line.strip()]
    plugins = re.search(r"plugins/dist/\{([^}]*)\}\.wasm", text).group(1).split(",")
    return models, plugins


class Server:
    """`infergate serve` on random loopback ports, as run.sh sets it up."""

    def __init__(self, binary, work):
        self.binary, self.data = binary, os.path.join(work, "data")
        env = os.environ
        models, plugins = run_sh_demo()
        for name, file in models:
            self.cli("models", "add", "--data-dir", self.data, "--name", name,
                     os.path.join(env["INFERGATE_MODELS"], file))
        self.cli("plugins", "add", "--data-dir", self.data,
                 *[os.path.join(env["INFERGATE_PLUGINS"], f"{p}.wasm") for p in plugins])
        for spec in sorted(glob.glob(os.path.join(ROOT, "scripts", "demo", "*.json"))):
            name = os.path.splitext(os.path.basename(spec))[0]
            self.cli("pipelines", "put", "--data-dir", self.data, name, f"@{spec}")
        self.log_path = os.path.join(work, "server.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", self.data, "--listen", "127.0.0.1:0",
             "--grpc-listen", "127.0.0.1:0",
             "--openai-vocab", os.path.join(env["INFERGATE_MODELS"], "textgen-vocab.json")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**env, "NO_COLOR": "1"})
        lines = queue.Queue()

        def pump():
            for line in self.proc.stderr:
                self.log.write(line)
                self.log.flush()
                lines.put(line)
            lines.put(None)
        threading.Thread(target=pump, daemon=True).start()
        self.url = self.grpc = None
        deadline = time.monotonic() + 120
        while self.url is None or self.grpc is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                raise SystemExit(f"the server did not start; its log:\n{open(self.log_path).read()}")
            m = re.search(r"(grpc )?listening on (https?)://(\S+)", line)
            if m and m.group(1):
                self.grpc = m.group(3)
            elif m:
                self.url = f"{m.group(2)}://{m.group(3)}"
        self.admin_key = open(os.path.join(self.data, "admin.key")).read().strip()
        self.app_key = self.cli("keys", "create", "--data-dir", self.data, "--scope", "infer",
                                "--name", "docs-examples").strip()
        self.ca = os.path.join(self.data, "tls", "cert.pem")

    def cli(self, *args):
        done = subprocess.run([self.binary, *args], capture_output=True, text=True,
                              env={**os.environ, "NO_COLOR": "1"})
        if done.returncode != 0:
            raise SystemExit(f"infergate {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def fixtures(directory):
    """cat.png (a photo of a cat) and page.png (three printed lines), made once."""
    os.makedirs(directory, exist_ok=True)
    script = r"""
import io, os, shutil, sys
import skimage
from PIL import Image, ImageDraw, ImageFont
out = sys.argv[1]
shutil.copy(os.path.join(os.path.dirname(skimage.__file__), "data", "chelsea.png"),
            os.path.join(out, "cat.png"))
img = Image.new("RGB", (460, 200), "white")
draw = ImageDraw.Draw(img)
font = ImageFont.load_default(size=30)
for i, line in enumerate(["FIRST LINE 1", "second line 22", "Third 333"]):
    draw.text((14, 12 + i * 60), line, fill="black", font=font)
img.save(os.path.join(out, "page.png"))
"""
    subprocess.run([os.environ["INFERGATE_PYTHON"], "-c", script, directory], check=True)


def page_script(blocks, n_lines, work):
    """A bash script with each runnable block on its page's own lines, so that $LINENO in the
    ERR trap is the page's line; Python blocks run from files padded to their page lines."""
    lines = [""] * (n_lines + 1)
    lines[0] = ('set -eEo pipefail; trap \'echo "$LINENO" > "$__ERR"\' ERR; '
                '__O="$__DIR/out"; mkdir -p "$__O"')
    for b in blocks:
        if b.lang not in RUNNABLE or b.skip is not None:
            continue
        out = f'"$__O/{b.line}"'
        lines[b.line - 1] = "{"
        if b.lang == "python":
            py = os.path.join(work, f"{os.path.basename(b.page)}.{b.line}.py")
            with open(py, "w") as f:
                f.write("\n" * b.line + b.text + "\n")
            lines[b.line] = f'"$INFERGATE_PYTHON" "{py}"'
        else:
            for k, text in enumerate(b.text.split("\n")):
                lines[b.line + k] = text
        lines[b.end - 1] = f"}} > {out} 2> {out}.err; echo {b.line} >> \"$__DIR/done\""
    return "\n".join(lines) + "\n"


def matches(expected, actual):
    want = [line.rstrip() for line in expected.strip("\n").split("\n")]
    got = [line.rstrip() for line in actual.strip("\n").split("\n")]
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):
        pattern = ".*".join(re.escape(part) for part in w.split("..."))
        if not re.fullmatch(pattern, g):
            return False
    return True


def run_page(page, blocks, server, work, fixture_dir, timeout):
    """Runs a page's blocks; returns the list of failures (strings)."""
    name = os.path.relpath(page, ROOT).replace(os.sep, "_")
    d = os.path.join(work, "pages", name)
    os.makedirs(d)
    for f in os.listdir(fixture_dir):
        shutil.copy(os.path.join(fixture_dir, f), d)
    os.symlink(server.data, os.path.join(d, "data"))
    curl_home = os.path.join(d, ".curl")
    os.makedirs(curl_home)
    with open(os.path.join(curl_home, ".curlrc"), "w") as f:
        f.write("silent\nshow-error\nfail-with-body\n")
    n_lines = len(open(page, encoding="utf-8").read().split("\n"))
    script = os.path.join(d, "page.sh")
    with open(script, "w") as f:
        f.write(page_script(blocks, n_lines, d))
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(os.path.abspath(server.binary))}:{os.environ['PATH']}",
        "GATEWAY_URL": server.url, "GATEWAY_CA": server.ca, "GATEWAY_GRPC": server.grpc,
        "INFERGATE_API_KEY": server.admin_key, "APP_KEY": server.app_key,
        "INFERGATE_REPO": ROOT, "CURL_HOME": curl_home, "NO_COLOR": "1",
        "__DIR": d, "__ERR": os.path.join(d, "err"),
    }
    for inherited in ("INFERGATE_DATA_DIR", "INFERGATE_URL", "INFERGATE_STORE"):
        env.pop(inherited, None)
    proc = subprocess.Popen(["bash", script], cwd=d, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        stderr = ""
    finally:
        # The page's background processes (a manager, workers) end with it.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(1)
        proc.wait()
    done = set()
    if os.path.exists(os.path.join(d, "done")):
        done = {int(x) for x in open(os.path.join(d, "done")).read().split()}
    failures = []

    def output_of(b, stream=""):
        path = os.path.join(d, "out", f"{b.line}{stream}")
        return open(path, errors="replace").read() if os.path.exists(path) else ""

    def both(b):
        return output_of(b) + output_of(b, ".err")

    runnable = [b for b in blocks if b.lang in RUNNABLE and b.skip is None]
    for b in runnable:
        if b.line in done:
            if b.expected is not None and not matches(b.expected.text, output_of(b)):
                failures.append(f"{b.where(b.expected.line)}: the output differs from the book's\n"
                                f"--- expected\n{b.expected.text}\n--- got\n{output_of(b)}")
            continue
        if timed_out:
            failures.append(f"{b.where()}: timed out after {timeout} s\n{both(b)}")
        else:
            err = os.path.join(d, "err")
            line = int(open(err).read().split()[0]) if os.path.exists(err) else b.line
            failures.append(f"{b.where(line)}: the {b.lang} block (fence at line {b.line}) failed\n"
                            f"{both(b)}{stderr}")
        break
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--page", action="append", help="only these pages (paths from the root)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per page")
    args = ap.parse_args()
    binary = os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "debug", "infergate"))
    for var in ("INFERGATE_MODELS", "INFERGATE_PLUGINS", "INFERGATE_PYTHON"):
        if var not in os.environ:
            raise SystemExit(f"{var} is not set: source .cache/env.sh first")
    selected = pages()
    if args.page:
        wanted = {os.path.normpath(os.path.join(ROOT, p)) for p in args.page}
        selected = [p for p in selected if p in wanted]
    parsed = [(p, parse(p)) for p in selected]
    skipped = [(b, b.skip) for _, bs in parsed for b in bs if b.lang in RUNNABLE and b.skip is not None]
    todo = [(p, bs) for p, bs in parsed if any(b.lang in RUNNABLE and b.skip is None for b in bs)]
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="infergate-docs-")
    failures, ran = [], 0
    server = None
    try:
        fixture_dir = os.path.join(work, "fixtures")
        fixtures(fixture_dir)
        server = Server(binary, work)
        for page, blocks in todo:
            t = time.monotonic()
            page_failures = run_page(page, blocks, server, work, fixture_dir, args.timeout)
            count = sum(b.lang in RUNNABLE and b.skip is None for b in blocks)
            ran += count
            status = "FAILED" if page_failures else "ok"
            print(f"docs examples: {os.path.relpath(page, ROOT)}: {count} blocks, "
                  f"{time.monotonic() - t:.1f} s, {status}", flush=True)
            failures += page_failures
    finally:
        if server is not None:
            server.stop()
        if args.keep or failures:
            print(f"docs examples: scratch directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for b, reason in skipped:
        print(f"docs examples: skipped {b.where()} ({b.lang}): {reason}")
    for f in failures:
        print(f"\ndocs examples: FAILED {f}")
    elapsed = time.monotonic() - started
    print(f"\ndocs examples: {ran} blocks on {len(todo)} pages in {elapsed:.0f} s, "
          f"{len(skipped)} skipped, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
