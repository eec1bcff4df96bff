#!/usr/bin/env python3
"""The size limits of the project's sources (issue 12): no C++ source file
outside tests/ and generated code over 500 lines, no function over 120.

Functions are found by brace matching on the source with comments, strings
and character literals blanked out: a '{' opens a function body when the
text before it (back to the previous ';', '{' or '}') ends in a parameter
list, possibly followed by const, noexcept, override, a trailing return type
or a constructor's initializer list, and is not a control statement or a
lambda. Lambdas and local classes count toward the function they are in.

Usage: check_code_size.py [ROOT]   (exit 1 and a list when a limit is broken)
       check_code_size.py --self-test
"""
import os
import re
import sys

import source_tree

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 120
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|return)\s*(\(|$)")


def blank(text):
    """Comments, string and char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def is_function_head(head):
    head = " ".join(head.split())
    if not head or CONTROL.search(head) or head.startswith("#"):
        return False
    if re.search(r"\]\s*(\([^()]*\))?\s*(mutable\s*)?(->\s*[\w:<>,\s*&]+)?$", head):
        return False  # a lambda
    if re.search(r"\b(namespace|class|struct|union|enum)\b[^()]*$", head):
        return False
    # ... ) [const] [noexcept] [override] [-> T]   or   ... ) : member(init), ...
    return bool(re.search(r"\)\s*(const|noexcept|override|final|\s)*(->\s*[\w:<>,\s*&]+)?$", head)
                or re.search(r"\)\s*:\s*[\w:]+[({]", head))


def functions(text):
    """(name, first line, line count) of each function body."""
    # Braced initializers (w_{v}, Shape{1, 2}) read as parentheses, so that a
    # constructor's initializer list does not look like its body.
    src = re.sub(r"(\w)\{([^{}]*)\}", r"\1(\2)", blank(text))
    found, depth, inside, start, head_start, head = [], 0, None, 0, 0, ""
    for i, c in enumerate(src):
        if c == "{":
            if inside is None and is_function_head(src[head_start:i]):
                inside, start, head = depth, i, src[head_start:i]
            depth += 1
            head_start = i + 1
        elif c == "}":
            depth -= 1
            if inside is not None and depth == inside:
                first = src.count("\n", 0, start) + 1
                last = src.count("\n", 0, i) + 1
                name = re.search(r"([~\w:]+(?:operator\S+)?)\s*\(", head)
                found.append((name.group(1) if name else "?", first, last - first + 1))
                inside = None
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def self_test():
    """The detector sees functions of every shape it must, and only those."""
    body = "\n".join(f"  x += {i};" for i in range(130))
    text = ("namespace a {\nstruct S {\n  int f() const {\n" + body + "\n  }\n};\n"
            "S::S(int v) : v_(v), w_{v} {\n  auto l = [&](int q) -> int {\n    return q;\n  };\n}\n"
            "void g() {\n  if (x) {\n    y(\"}\");  // }\n  }\n  for (;;) {}\n}\n}  // namespace a\n")
    got = {(name, count) for name, _, count in functions(text)}
    want = {("f", 132), ("S::S", 5), ("g", 6)}
    if got != want:
        print(f"FAIL: self-test found {sorted(got)}, expected {sorted(want)}")
        return 1
    print("self-test: ok")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else source_tree.default_root(__file__)
    problems, files, funcs = [], 0, 0
    for layer in source_tree.LAYERS:
        for path in source_tree.sources(root, layer):
            text = open(path, encoding="utf-8").read()
            rel = os.path.relpath(path, root)
            files += 1
            lines = text.count("\n")
            if lines > MAX_FILE_LINES:
                problems.append(f"{rel}: {lines} lines (limit {MAX_FILE_LINES})")
            for fn, first, count in functions(text):
                funcs += 1
                if count > MAX_FUNCTION_LINES:
                    problems.append(f"{rel}:{first}: {fn} is {count} lines "
                                    f"(limit {MAX_FUNCTION_LINES})")
    return source_tree.report(f"{files} files, {funcs} functions checked", problems, funcs)


if __name__ == "__main__":
    sys.exit(main())
