"""Build amqwire: the top-level folders map onto the ``amqwire.*`` packages.

``codec/`` is compiled with Cython.  Cython resolves ``cimport amqwire.codec.x`` by
looking for ``amqwire/codec/x.pxd`` on its include path, and that path does not exist
in this layout, so the build writes a tiny include tree of symlinks under ``build/``.
"""
import os
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = {"amqwire.codec": "codec", "amqwire.client": "client"}
CYTHON_MODULES = ["buffer", "table", "properties", "methods", "writer", "parser"]


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


def extensions():
    from Cython.Build import cythonize

    # AMQWIRE_DEBUG=1: unoptimized with symbols (gdb); AMQWIRE_PROFILE=1: optimized with
    # symbols (callgrind_annotate by source line).
    debug = os.environ.get("AMQWIRE_DEBUG") == "1"
    profile = os.environ.get("AMQWIRE_PROFILE") == "1"
    exts = [
        Extension(
            f"amqwire.codec.{name}",
            [os.path.join("codec", f"{name}.pyx")],
            include_dirs=[os.path.join(HERE, "codec")],
            extra_compile_args=["-O0", "-g"] if debug else ["-O3", "-g" if profile else "-g0"],
        )
        for name in CYTHON_MODULES
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
    },
    exclude_package_data={"amqwire.codec": ["*.pyx", "*.c"]},
    ext_modules=extensions(),
    zip_safe=False,
)
