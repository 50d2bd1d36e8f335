"""scripts/debian-sysroot's index reading, dependency closure and link rewriting, on a
made-up index and a temporary tree (its downloads and gpgv check need a mirror: those
run in scripts/cross)."""
import importlib.machinery
import importlib.util
import os
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "debian-sysroot"


def load():
    loader = importlib.machinery.SourceFileLoader("debian_sysroot", str(SCRIPT))
    spec = importlib.util.spec_from_loader("debian_sysroot", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ds = load()

INDEX = """Package: libfoo-dev
Version: 1.2-1
Architecture: armhf
Depends: libfoo1 (= 1.2-1), libc6-dev | libc-dev, libbar-dev:any
Description: the foo library
 Depends: not-a-field (a continuation line of the description)
Filename: pool/main/f/foo/libfoo-dev_1.2-1_armhf.deb

Package: libfoo1
Version: 1.2-1
Pre-Depends: libc6 (>= 2.34)
Depends: libgcc-s1, libstdc++6 (>= 12) [!hurd-i386]

Package: libbar-dev
Depends: libstdc++-12-dev, virtual-zip | libzip-dev

Package: zipper
Provides: virtual-zip (= 3), other-virtual

Package: libc6
Depends: libgcc-s1

Package: libc6-dev
Depends: libc6

Package: libgcc-s1

Package: libstdc++6
Depends: libc6
"""


def test_parse_index_reads_single_line_fields_and_providers():
    index, provides = ds.parse_index(INDEX)
    assert sorted(index) == sorted(["libfoo-dev", "libfoo1", "libbar-dev", "zipper", "libc6", "libc6-dev",
                                    "libgcc-s1", "libstdc++6"])
    assert index["libfoo-dev"]["Filename"] == "pool/main/f/foo/libfoo-dev_1.2-1_armhf.deb"
    assert "not-a-field" not in index["libfoo-dev"]["Depends"]
    assert provides == {"virtual-zip": ["zipper"], "other-virtual": ["zipper"]}


def test_closure_follows_depends_and_pre_depends_without_the_compilers_packages():
    index, provides = ds.parse_index(INDEX)
    chosen = ds.closure(["libfoo-dev"], index, provides)
    # Versions, architecture qualifiers (:any) and restrictions are dropped; the first
    # alternative the index has is taken, a virtual package through its provider.
    # libc6-dev and libstdc++-12-dev are the cross compiler's: skipped, and satisfied
    # even where the index lacks them.
    assert set(chosen) == {"libfoo-dev", "libfoo1", "libbar-dev", "zipper", "libc6", "libgcc-s1", "libstdc++6"}
    assert chosen[0] == "libfoo-dev"
    assert len(chosen) == len(set(chosen))


def test_closure_names_what_is_missing():
    index, provides = ds.parse_index(INDEX + "\nPackage: broken\nDepends: libnowhere (>= 1)\n")
    with pytest.raises(SystemExit) as e:
        ds.closure(["broken"], index, provides)
    assert "broken depends on 'libnowhere (>= 1)'" in str(e.value)
    with pytest.raises(SystemExit) as e:
        ds.closure(["libabsent-dev"], index, provides)
    assert "libabsent-dev is not in the index" in str(e.value)


def test_absolute_links_point_into_the_sysroot(tmp_path):
    root = tmp_path / "sysroot"
    (root / "lib" / "arm-linux-gnueabihf").mkdir(parents=True)
    (root / "usr" / "lib" / "arm-linux-gnueabihf").mkdir(parents=True)
    real = root / "lib" / "arm-linux-gnueabihf" / "libz.so.1.2.13"
    real.write_bytes(b"\x7fELF")
    link = root / "usr" / "lib" / "arm-linux-gnueabihf" / "libz.so"
    os.symlink("/lib/arm-linux-gnueabihf/libz.so.1.2.13", link)
    relative = root / "usr" / "lib" / "arm-linux-gnueabihf" / "libfoo.so"
    os.symlink("libfoo.so.1", relative)
    ds.relative_links(str(root))
    assert not os.readlink(link).startswith("/")
    assert link.resolve() == real.resolve()
    assert os.readlink(relative) == "libfoo.so.1"  # relative links stay as they were
