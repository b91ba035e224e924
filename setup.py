"""Build amqwire: the top-level folders map onto the ``amqwire.*`` packages.

``codec/``, the confirm hot path of ``client/`` and modules of ``spark/`` are compiled with
Cython.  Cython resolves ``cimport amqwire.codec.x`` by looking for ``amqwire/codec/x.pxd``
on its include path, and that path does not exist in this layout, so the build writes a
tiny include tree of symlinks under ``build/``.  Cythonizing happens in ``build_ext`` only,
so making an sdist neither needs nor runs Cython's compiler.

What goes where: the sdist carries the ``.pyx``/``.pxd``/``.pxi``/headers a build needs,
the generators with the spec they read, the tests and the benchmarks (``MANIFEST.in``).
The wheel carries the compiled modules, the Python modules, the ``.pyi`` stubs and
``py.typed``, and the ``.pxd`` files with the headers they name (so another Cython
project can ``cimport amqwire.codec.buffer``); not the ``.pyx`` sources, the generated C,
the generators (``codec/codegen.py``, ``client/make_sync.py``) or the spec JSON, which
nothing needs at run time.
"""
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = {"amqwire.codec": "codec", "amqwire.client": "client", "amqwire.spark": "spark", "amqwire.bridge": "bridge",
            "amqwire.cli": "cli"}
# The top-level package, from cli/toplevel/: an __init__.py that imports nothing, and the
# __main__ of ``python -m amqwire``.  A regular package, not a namespace: a folder named
# ``amqwire`` earlier on sys.path (a checkout used from its parent folder) would otherwise
# merge with the installed package and shadow its compiled modules.
TOP_LEVEL = {"amqwire": "cli/toplevel"}
# Subpackages: package_dir finds them under their parent's folder (client/producer/).
SUBPACKAGES = ["amqwire.client.producer", "amqwire.codec.stream", "amqwire.client.stream"]
# (folder, module): compiled in this order; spark's modules cimport the codec's.  A folder
# below a package's (codec/stream) is its subpackage (amqwire.codec.stream).
CYTHON_MODULES = [("codec", name) for name in ["buffer", "table", "properties", "methods", "writer", "parser"]]
CYTHON_MODULES += [("codec/stream", name) for name in ["amqp10", "frames", "chunk"]]
# The client's publish and confirm hot paths: the core's publish, a confirmed publish with room and
# the core's ack frame, the slot reads they use, the connection lock they take, the futures an ack
# frame settles (blocking and asyncio), the seqno tracker.
CYTHON_MODULES += [("client", name) for name in [
    "slots", "thread_lock", "thread_future", "loop_future", "confirm_tracker", "publish_path", "ack_path", "write_path",
]]
CYTHON_MODULES += [("spark", name) for name in ["arrow_view", "arrow_columns", "encode", "stream_batch", "stream_chunks", "stream_encode"]]
# Development tools that live beside the code they generate but are not part of the product.
NOT_SHIPPED = {("amqwire.codec", "codegen"), ("amqwire.client", "make_sync")}


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


class cythonize_then_build_ext(build_ext):
    def run(self):
        from Cython.Build import cythonize

        # cythonize returns new Extension objects; keep setuptools' (finalized) ones and give
        # them the generated C sources.
        generated = cythonize(
            self.extensions,
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
        sources = {ext.name: ext.sources for ext in generated}
        for ext in self.extensions:
            ext.sources = sources[ext.name]
        super().run()


class build_py_without_tools(build_py):
    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) not in NOT_SHIPPED]


def extensions():
    # AMQWIRE_DEBUG=1: unoptimized with symbols (gdb); AMQWIRE_PROFILE=1: optimized with
    # symbols (callgrind_annotate by source line); AMQWIRE_FUZZ=1: see fuzz_build().
    debug = os.environ.get("AMQWIRE_DEBUG") == "1"
    profile = os.environ.get("AMQWIRE_PROFILE") == "1"
    compile_args = ["-O0", "-g"] if debug else ["-O3", "-g" if profile else "-g0"]
    link_args: list[str] = []
    if os.environ.get("AMQWIRE_FUZZ") == "1":
        compile_args, link_args = fuzz_build()
    return [
        Extension(
            f"amqwire.{folder.replace('/', '.')}.{name}",
            [f"{folder}/{name}.pyx"],
            include_dirs=["codec"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        )
        for folder, name in CYTHON_MODULES
    ]


setup(
    packages=[*TOP_LEVEL, *PACKAGES, *SUBPACKAGES],
    package_dir={**TOP_LEVEL, **PACKAGES},
    include_package_data=False,
    package_data={
        "amqwire.codec": ["*.pyi", "*.pxd", "*.h", "py.typed"],
        "amqwire.codec.stream": ["*.pyi", "*.pxd", "py.typed"],
        "amqwire.client.stream": ["py.typed"],
        "amqwire.client": ["*.pyi", "*.pxd", "py.typed"],
        "amqwire.spark": ["*.pyi", "*.pxd", "py.typed"],
        "amqwire.bridge": ["py.typed"],
        "amqwire.cli": ["py.typed"],
    },
    ext_modules=extensions(),
    cmdclass={"build_ext": cythonize_then_build_ext, "build_py": build_py_without_tools},
    zip_safe=False,
    # An instrumented build keeps its objects apart: build_ext skips up-to-date objects,
    # and a shipped wheel must never pick up a sanitized one (or the reverse).
    options={"build": {"build_base": "build/fuzz"}} if os.environ.get("AMQWIRE_FUZZ") == "1" else {},
)
