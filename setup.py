"""Build amqwire: the top-level folders map onto the ``amqwire.*`` packages.

``codec/`` is compiled with Cython.  Cython resolves ``cimport amqwire.codec.x`` by
looking for ``amqwire/codec/x.pxd`` on its include path, and that path does not exist
in this layout, so the build writes a tiny include tree of symlinks under ``build/``.
"""
import os
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = {"amqwire.codec": "codec", "amqwire.client": "client", "amqwire.spark": "spark"}
# (folder, module): compiled in this order; spark's modules cimport the codec's
CYTHON_MODULES = [("codec", name) for name in ["buffer", "table", "properties", "methods", "writer", "parser"]]
CYTHON_MODULES += [("spark", name) for name in ["arrow_view", "encode"]]


def cython_include_tree():
    """build/cython-include/amqwire/<pkg> -> ../../../<folder>, for cimport resolution."""
    root = os.path.join(HERE, "build", "cython-include")
    pkg_root = os.path.join(root, "amqwire")
    os.makedirs(pkg_root, exist_ok=True)
    for dotted, folder in PACKAGES.items():
        link = os.path.join(pkg_root, dotted.split(".")[-1])
        target = os.path.join(HERE, folder)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)
    return root


def fuzz_build():
    """AMQWIRE_FUZZ=1: clang with libFuzzer's coverage hooks, AddressSanitizer and UBSan, so
    that atheris sees the C code's edges (fuzz/README.md).  Such a build only imports with
    atheris' sanitizer runtime preloaded; it is never shipped."""
    cc = os.environ.get("AMQWIRE_FUZZ_CC", "clang")
    os.environ["CC"] = cc
    os.environ["LDSHARED"] = f"{cc} -shared"
    sanitizers = "-fsanitize=fuzzer-no-link,address,undefined"
    compile_args = ["-O1", "-g", "-fno-omit-frame-pointer", sanitizers, "-fno-sanitize-recover=undefined"]
    return compile_args, [sanitizers]


def extensions():
    from Cython.Build import cythonize

    # AMQWIRE_DEBUG=1: unoptimized with symbols (gdb); AMQWIRE_PROFILE=1: optimized with
    # symbols (callgrind_annotate by source line); AMQWIRE_FUZZ=1: see fuzz_build().
    debug = os.environ.get("AMQWIRE_DEBUG") == "1"
    profile = os.environ.get("AMQWIRE_PROFILE") == "1"
    compile_args = ["-O0", "-g"] if debug else ["-O3", "-g" if profile else "-g0"]
    link_args: list = []
    if os.environ.get("AMQWIRE_FUZZ") == "1":
        compile_args, link_args = fuzz_build()
    exts = [
        Extension(
            f"amqwire.{folder}.{name}",
            [os.path.join(folder, f"{name}.pyx")],
            include_dirs=[os.path.join(HERE, "codec")],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        )
        for folder, name in CYTHON_MODULES
    ]
    return cythonize(
        exts,
        include_path=[cython_include_tree(), HERE],
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
        },
        annotate=os.environ.get("AMQWIRE_ANNOTATE") == "1",
    )


setup(
    packages=list(PACKAGES),
    package_dir=PACKAGES,
    package_data={
        "amqwire.codec": ["*.pyi", "*.pxd", "*.h", "py.typed", "*.json"],
        "amqwire.client": ["py.typed"],
        "amqwire.spark": ["*.pyi", "*.pxd", "py.typed"],
    },
    exclude_package_data={"amqwire.codec": ["*.pyx", "*.c"], "amqwire.spark": ["*.pyx", "*.c"]},
    ext_modules=extensions(),
    zip_safe=False,
    # An instrumented build keeps its objects apart: build_ext skips up-to-date objects,
    # and a shipped wheel must never pick up a sanitized one (or the reverse).
    options={"build": {"build_base": "build/fuzz"}} if os.environ.get("AMQWIRE_FUZZ") == "1" else {},
)
