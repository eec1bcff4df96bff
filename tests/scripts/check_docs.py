#!/usr/bin/env python3
"""The documentation stays true (README.md, ARCHITECTURE.md and docs/):

  - every flag that `attention-server --help`, `attention-client --help` and
    each `attention-client COMMAND --help` print appears in docs/;
  - every relative link resolves: the file exists and, with a #fragment,
    the target has a heading of that anchor (GitHub's slugs);
  - README.md is a front page of at most 250 lines, and each docs/ page
    opens with what it answers ("**This page answers:**");
  - the user docs (README.md, docs/, client/python/README.md and the
    comments of proto/) cite no internal issue numbers ("issue 23"): users
    cannot see them, so a feature or a section is named instead;
  - every table of the performance pages (docs/performance*.md) names its
    CPU (a model such as "AMD EPYC Zen 5") in its section's headings or in
    the text between the previous table or heading and it;
  - with --curl, every sh block that calls the OIP HTTP port
    (localhost:8000) runs against a server started here, each curl failing
    on an HTTP error, so the curl examples work as printed.

Usage: check_docs.py ROOT SERVER_BIN CLIENT_BIN [--curl]
       check_docs.py --self-test   (each check fails on a planted error)
Exit 1 with a list of problems.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]+)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAX_README_LINES = 250
OPENER = "**This page answers:**"
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+|(?<![\w/&])#\d{1,4}\b", re.I)
CPU_NAME = re.compile(r"\b(AMD|Intel|EPYC|Xeon|Ryzen|Zen ?\d|Sapphire Rapids|Graviton|Neoverse)\b")


def doc_files(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "ARCHITECTURE.md")]
    docs = os.path.join(root, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    found, in_code = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def help_flags(server_bin, client_bin):
    """{flag: where it was printed}."""
    def run(args):
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout

    flags = {}
    texts = [("attention-server --help", run([server_bin, "--help"])),
             ("attention-client --help", run([client_bin, "--help"]))]
    commands = re.findall(r"^  ([a-z]+)\s{2,}", texts[1][1].split("common flags:")[0], re.M)
    if not commands:
        raise SystemExit("check_docs.py: no commands in attention-client --help")
    for cmd in commands:
        texts.append((f"attention-client {cmd} --help", run([client_bin, cmd, "--help"])))
    for where, text in texts:
        for flag in FLAG.findall(text):
            flags.setdefault(flag, where)
    return flags, len(texts)


def check_flags(root, flags):
    text = "".join(open(p, encoding="utf-8").read()
                   for p in doc_files(root) if os.sep + "docs" + os.sep in p)
    documented = set(FLAG.findall(text))
    return [f"{flag} (from `{where}`) appears nowhere in docs/"
            for flag, where in sorted(flags.items()) if flag not in documented and flag != "--help"]


def check_links(root):
    problems, count = [], 0
    for path in doc_files(root):
        rel = os.path.relpath(path, root)
        in_code = False
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if line.startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                continue
            for url in LINK.findall(line):
                if re.match(r"[a-z]+:", url):
                    continue
                count += 1
                target, _, fragment = url.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{n}: link to {url}: no file {os.path.relpath(dest, root)}")
                elif fragment and (not dest.endswith(".md") or fragment not in anchors(dest)):
                    problems.append(f"{rel}:{n}: link to {url}: no heading #{fragment} there")
    return problems, count


def check_pages(root):
    problems = []
    readme = os.path.join(root, "README.md")
    lines = sum(1 for _ in open(readme, encoding="utf-8"))
    if lines > MAX_README_LINES:
        problems.append(f"README.md has {lines} lines, more than {MAX_README_LINES}: move sections to docs/")
    for path in doc_files(root):
        if os.sep + "docs" + os.sep not in path:
            continue
        head = open(path, encoding="utf-8").read().split("\n")[:5]
        if not any(l.startswith(OPENER) for l in head):
            problems.append(f"{os.path.relpath(path, root)}: does not open with '{OPENER} ...'")
    return problems


def user_doc_files(root):
    """The pages and comments a user reads: README.md, docs/, the Python
    package's README and the .proto files under proto/."""
    files = [p for p in doc_files(root) if not p.endswith("ARCHITECTURE.md")]
    extra = os.path.join(root, "client", "python", "README.md")
    if os.path.exists(extra):
        files.append(extra)
    for d, _, names in os.walk(os.path.join(root, "proto")):
        files += sorted(os.path.join(d, n) for n in names if n.endswith(".proto"))
    return files


def check_issue_numbers(root):
    problems = []
    for path in user_doc_files(root):
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if path.endswith(".proto") and "//" not in line:
                continue
            text = line.split("//", 1)[1] if path.endswith(".proto") else line
            for m in ISSUE_NUMBER.finditer(text):
                problems.append(f"{os.path.relpath(path, root)}:{n}: cites the internal "
                                f"'{m.group(0)}': name the feature or the section instead")
    return problems


def check_table_cpus(root):
    """Every table of docs/performance*.md names its CPU: in the headings of
    its section, or between the previous table (or heading) and it."""
    problems = []
    docs = os.path.join(root, "docs")
    for name in sorted(os.listdir(docs)):
        if not (name.startswith("performance") and name.endswith(".md")):
            continue
        path = os.path.join(docs, name)
        headings = {}       # level -> heading text, the current section's path
        since = []          # lines since the previous table or heading
        in_code = in_table = False
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                since.append(line)
                continue
            if line.startswith("#"):
                level = len(line) - len(line.lstrip("#"))
                headings = {k: v for k, v in headings.items() if k < level}
                headings[level] = line
                since, in_table = [], False
            elif line.startswith("|"):
                if not in_table:
                    context = "".join(headings.values()) + "".join(since)
                    if not CPU_NAME.search(context):
                        problems.append(f"docs/{name}:{n}: a table that names no CPU (say which "
                                        "CPU model measured it, above it)")
                in_table = True
                since = []
            else:
                if in_table and line.strip():
                    in_table = False
                since.append(line)
    return problems


def curl_blocks(root):
    """(file, first line, text) of every sh block that calls localhost:8000."""
    blocks = []
    for path in doc_files(root):
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```sh":
                j = i + 1
                while j < len(lines) and lines[j].strip() != "```":
                    j += 1
                text = "\n".join(lines[i + 1:j])
                # Calls to the OIP HTTP port; not blocks that build or
                # deploy images (docs/deployment.md), which need a cluster.
                if "localhost:8000" in text and not re.search(r"\b(docker|podman|kubectl) ", text):
                    blocks.append((os.path.relpath(path, root), i + 2, text))
                i = j
            i += 1
    return blocks


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_curl(root, server_bin):
    blocks = curl_blocks(root)
    if not blocks:
        return ["no sh block calls localhost:8000: the curl examples are gone"], 0
    grpc_port, http_port = free_port(), free_port()
    server = subprocess.Popen([server_bin, "--host", "127.0.0.1", "--port", str(grpc_port),
                               "--http-port", str(http_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    problems = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        for rel, line, text in blocks:
            script = ("set -euo pipefail\n"
                      "curl() { command curl --fail --max-time 60 \"$@\"; }\n"
                      + text.replace("localhost:8000", f"127.0.0.1:{http_port}"))
            with tempfile.TemporaryDirectory() as work:
                r = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True,
                                   text=True, timeout=120)
            if r.returncode != 0:
                problems.append(f"{rel}:{line}: the sh block failed (exit {r.returncode}): "
                                f"{(r.stderr or r.stdout).strip()[-300:]}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return problems, len(blocks)


def check(root, server_bin, client_bin, curl):
    flags, helps = help_flags(server_bin, client_bin)
    problems = check_flags(root, flags)
    link_problems, links = check_links(root)
    problems += link_problems + check_pages(root) + check_issue_numbers(root)
    problems += check_table_cpus(root)
    summary = f"{len(flags)} flags from {helps} --help texts, {links} relative links"
    if curl:
        curl_problems, blocks = check_curl(root, server_bin)
        problems += curl_problems
        summary += f", {blocks} curl blocks run"
    return summary, problems


def self_test(server_bin, client_bin):
    """Each check fails on an error planted in a copy of the docs."""
    real = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        def fresh():
            shutil.rmtree(tmp)
            os.makedirs(os.path.join(tmp, "docs"))
            for p in doc_files(real):
                shutil.copyfile(p, os.path.join(tmp, os.path.relpath(p, real)))
            for sub in ("client", "deploy", "tests"):  # link targets
                os.symlink(os.path.join(real, sub), os.path.join(tmp, sub))
            shutil.copytree(os.path.join(real, "proto"), os.path.join(tmp, "proto"))

        def planted(what, edit, words):
            fresh()
            edit()
            _, problems = check(tmp, server_bin, client_bin, curl=False)
            if not any(words in p for p in problems):
                failures.append(f"{what}: not caught ({problems[:3]})")

        def append(rel, text):
            with open(os.path.join(tmp, rel), "a", encoding="utf-8") as f:
                f.write(text)

        def replace_in_docs(old, new):
            for name in os.listdir(os.path.join(tmp, "docs")):
                p = os.path.join(tmp, "docs", name)
                s = open(p, encoding="utf-8").read()
                open(p, "w", encoding="utf-8").write(s.replace(old, new))

        fresh()
        _, clean = check(tmp, server_bin, client_bin, curl=False)
        if clean:
            failures.append(f"the untouched copy already fails: {clean[:3]}")
        planted("an undocumented server flag", lambda: replace_in_docs("--max-queue", "--max-q"),
                "--max-queue")
        planted("an undocumented client flag", lambda: replace_in_docs("--stability", "--stab"),
                "--stability")
        planted("a link to a missing file", lambda: append("docs/api.md", "\n[x](nothere.md)\n"),
                "no file")
        planted("a link to a missing heading",
                lambda: append("README.md", "\n[x](docs/api.md#no-such-heading)\n"), "no heading")
        planted("a README over the limit", lambda: append("README.md", "\n" * 300), "README.md has")
        planted("a page without its opener", lambda: open(os.path.join(tmp, "docs/new.md"), "w").write("# New\n"),
                "does not open with")
        planted("an internal issue number in docs/",
                lambda: append("docs/api.md", "\nAs issue 41 asks.\n"), "cites the internal")
        planted("an internal issue number in a proto comment",
                lambda: append("proto/attention/v1/session.proto", "// see issue 25\n"),
                "cites the internal")
        planted("a performance table without its CPU",
                lambda: append("docs/performance.md", "\n## New rows\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"),
                "a table that names no CPU")
    print("9 planted documentation errors")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


def main(argv):
    if argv and argv[0] == "--self-test":
        return self_test(argv[1], argv[2])
    if len(argv) < 3:
        print(__doc__)
        return 2
    summary, problems = check(argv[0], argv[1], argv[2], curl="--curl" in argv)
    print(summary)
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
