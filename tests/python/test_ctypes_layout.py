"""The ctypes mirrors of flashmsa_args and flashmsa_merge_args match the C header: same fields
in the same order, and the same size and offsets as the C compiler lays them out."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(REPO, "include", "flashmsa", "flashmsa.h")


def header_field_names(struct="flashmsa_args"):
    """Field names of `typedef struct <struct> { ... }`, in declaration order."""
    with open(HEADER) as handle:
        text = handle.read()
    body = re.search(rf"typedef struct {struct} \{{(.*?)\}} {struct};", text, re.S).group(1)
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


def c_layout(tmp_path, struct, mirror, constants=()):
    """What the C compiler prints for `struct`: its size ("size"), each of the ctypes mirror's
    fields' offsets, and the values of the named integer constants."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to lay out the header's struct")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flashmsa/flashmsa.h"',
             "int main(void) {", f'  printf("size %zu\\n", sizeof({struct}));']
    lines += [f'  printf("{name} %d\\n", (int){name});' for name in constants]
    for name, _ in mirror._fields_:
        lines.append(f'  printf("{name} %zu\\n", offsetof({struct}, {name}));')
    lines += ["  return 0;", "}"]
    source = tmp_path / f"{struct}_layout.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / f"{struct}_layout"
    subprocess.run([compiler, "-I", os.path.join(REPO, "include"), str(source), "-o", str(binary)],
                   check=True)
    return dict(line.split() for line in subprocess.run(
        [str(binary)], check=True, capture_output=True, text=True).stdout.splitlines())


def test_fields_follow_the_header_in_order():
    assert [name for name, _ in _lib.Args._fields_] == header_field_names()


def test_size_and_offsets_match_the_c_compiler(tmp_path):
    printed = c_layout(tmp_path, "flashmsa_args", _lib.Args)
    assert int(printed.pop("size")) == ctypes.sizeof(_lib.Args), "sizeof(flashmsa_args)"
    for name, _ in _lib.Args._fields_:
        assert int(printed[name]) == getattr(_lib.Args, name).offset, f"offset of {name}"


def test_merge_args_fields_follow_the_header_in_order():
    assert ([name for name, _ in _lib.MergeArgs._fields_] ==
            header_field_names("flashmsa_merge_args"))


def test_merge_args_layout_matches_the_c_compiler(tmp_path):
    printed = c_layout(tmp_path, "flashmsa_merge_args", _lib.MergeArgs,
                       constants=("FLASHMSA_MERGE_DTYPE_FP32", "FLASHMSA_MERGE_DTYPE_BF16",
                                  "FLASHMSA_MERGE_DTYPE_FP16"))
    assert int(printed.pop("size")) == ctypes.sizeof(_lib.MergeArgs), "sizeof"
    assert int(printed.pop("FLASHMSA_MERGE_DTYPE_FP32")) == _lib.MERGE_DTYPE_FP32
    assert int(printed.pop("FLASHMSA_MERGE_DTYPE_BF16")) == _lib.MERGE_DTYPE_BF16
    assert int(printed.pop("FLASHMSA_MERGE_DTYPE_FP16")) == _lib.MERGE_DTYPE_FP16
    for name, _ in _lib.MergeArgs._fields_:
        assert int(printed[name]) == getattr(_lib.MergeArgs, name).offset, f"offset of {name}"
    assert len(printed) == len(_lib.MergeArgs._fields_)


def test_tuning_fields_follow_the_testing_header_in_order():
    with open(os.path.join(REPO, "include", "flashmsa", "flashmsa_testing.h")) as handle:
        text = handle.read()
    body = re.search(r"typedef struct flashmsa_tuning \{(.*?)\} flashmsa_tuning;", text,
                     re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = [re.findall(r"\w+", d)[-1] for d in body.split(";") if d.strip()]
    assert all("int32_t" in d for d in body.split(";") if d.strip()), "every field is int32_t"
    assert [name for name, _ in _lib.Tuning._fields_] == names
