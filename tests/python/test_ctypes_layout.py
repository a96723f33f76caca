"""The ctypes mirror of flashmsa_args matches the C header: same fields in the same order, and
the same size and offsets as the C compiler lays them out."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(REPO, "include", "flashmsa", "flashmsa.h")


def header_field_names():
    """Field names of `typedef struct flashmsa_args { ... }`, in declaration order."""
    with open(HEADER) as handle:
        text = handle.read()
    body = re.search(r"typedef struct flashmsa_args \{(.*?)\} flashmsa_args;", text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = []
    for declaration in body.split(";"):
        declaration = declaration.strip()
        if not declaration:
            continue
        # "int64_t a, b" or "const int32_t* p": the names follow the type.
        type_and_first, *others = declaration.split(",")
        names.append(re.findall(r"\w+", type_and_first)[-1])
        names.extend(other.strip() for other in others)
    return names


def test_fields_follow_the_header_in_order():
    assert [name for name, _ in _lib.Args._fields_] == header_field_names()


def test_size_and_offsets_match_the_c_compiler(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to lay out the header's struct")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flashmsa/flashmsa.h"',
             "int main(void) {", '  printf("size %zu\\n", sizeof(flashmsa_args));']
    for name, _ in _lib.Args._fields_:
        lines.append(f'  printf("{name} %zu\\n", offsetof(flashmsa_args, {name}));')
    lines += ["  return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "layout"
    subprocess.run([compiler, "-I", os.path.join(REPO, "include"), str(source), "-o", str(binary)],
                   check=True)
    printed = dict(line.split() for line in subprocess.run(
        [str(binary)], check=True, capture_output=True, text=True).stdout.splitlines())
    assert int(printed.pop("size")) == ctypes.sizeof(_lib.Args), "sizeof(flashmsa_args)"
    for name, _ in _lib.Args._fields_:
        assert int(printed[name]) == getattr(_lib.Args, name).offset, f"offset of {name}"


def test_tuning_fields_follow_the_testing_header_in_order():
    with open(os.path.join(REPO, "include", "flashmsa", "flashmsa_testing.h")) as handle:
        text = handle.read()
    body = re.search(r"typedef struct flashmsa_tuning \{(.*?)\} flashmsa_tuning;", text,
                     re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = [re.findall(r"\w+", d)[-1] for d in body.split(";") if d.strip()]
    assert all("int32_t" in d for d in body.split(";") if d.strip()), "every field is int32_t"
    assert [name for name, _ in _lib.Tuning._fields_] == names
