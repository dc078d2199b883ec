#!/usr/bin/env python3
"""make gpu-wheels: what the GPU machine lacks, prepared on a machine with
PyPI, sized for the device tool's 64 MiB per call (docs/gpu-day.md).

  pack.py wheels DEST     DeepSpeed (built here into a pure-Python wheel: PyPI
                          has only its source), bitsandbytes (its manylinux wheel,
                          with the CUDA 13 libraries only), liger-kernel, and what
                          they need that the machine's image lacks (KINDS.md's
                          package list): hjson, pydantic and its parts,
                          typing-extensions; then the sizes, in DEST/SIZES.txt
  pack.py bin BUILD DEST  ftrain, ftest and gpu_parity from BUILD (a CUDA build
                          linked with the static OpenBLAS), stripped, and the
                          shared libraries they need that a CUDA image may lack
                          (cJSON, libyaml), into DEST and DEST/lib; then DEST.tar.xz,
                          what travels: 58 MB of binaries (OpenBLAS's kernels for
                          every CPU, twice) are 2.3 MB in xz's 64 MiB window

The wheels are for the machine's Python 3.12 on x86-64 (pip download with
the device README's platform tags); versions are pinned here so that a day's
records name a stack that can be had again."""

import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

PY, PLATFORMS = "3.12", ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                         "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any")
# Binary wheels; versions current when this was written (2026-11), pydantic-core
# pinned to the version pydantic 2.14.4 requires.
BINARY = ("bitsandbytes==0.50.2", "liger-kernel==0.8.5", "hjson==3.1.0", "pydantic==2.14.4",
          "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5",
          "typing-extensions==4.16.0")
DEEPSPEED = "deepspeed==0.19.8"
# bitsandbytes loads libbitsandbytes_cudaXYZ for torch.version.cuda (13.0 there).
BNB_KEEP = ("libbitsandbytes_cuda130.so", "libbitsandbytes_cuda132.so", "libbitsandbytes_cpu.so")
CARRY_LIMIT = 64 << 20
SYSTEM_LIBS = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "ld-linux", "libgcc_s.so",
               "libstdc++.so", "linux-vdso", "libcudart.so", "libcublasLt.so", "libcublas.so", "libcuda.so")


def download(dest):
    plat = [x for p in PLATFORMS for x in ("--platform", p)]
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
            PY, "--implementation", "cp", "-d", dest] + plat
    for spec in BINARY:
        subprocess.run(base + [spec], check=True)


def build_deepspeed(dest):
    """DeepSpeed's sdist as a pure-Python wheel: DS_BUILD_OPS=0, no op
    compiled here; what it compiles at run time (none in the plan's default
    points) it compiles there, with the machine's nvcc and ninja."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "-d", d,
                        DEEPSPEED], check=True)
        sdist = [os.path.join(d, f) for f in os.listdir(d)][0]
        env = dict(os.environ, DS_BUILD_OPS="0")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dest, sdist], check=True, env=env)


def trim_bnb(dest):
    """The bitsandbytes wheel without the libraries of other CUDA and ROCm
    versions (43 MB to a few): the same wheel otherwise, its RECORD updated."""
    for name in os.listdir(dest):
        if not (name.startswith("bitsandbytes-") and name.endswith(".whl")):
            continue
        src = os.path.join(dest, name)
        tmp = src + ".tmp"
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
            for item in zin.infolist():
                base = os.path.basename(item.filename)
                if base.startswith("libbitsandbytes_") and base not in BNB_KEEP:
                    continue
                data = zin.read(item.filename)
                if item.filename.endswith(".dist-info/RECORD"):
                    data = b"".join(line + b"\n" for line in data.splitlines()
                                    if not (b"libbitsandbytes_" in line and
                                            not any(k.encode() in line for k in BNB_KEEP)))
                zout.writestr(item, data)
        os.replace(tmp, src)


def sizes(dest):
    rows = sorted((os.path.getsize(os.path.join(dest, f)), f) for f in os.listdir(dest) if f.endswith(".whl"))
    total = sum(s for s, _ in rows)
    text = "".join(f"{s:>10}  {f}\n" for s, f in rows) + f"{total:>10}  together (the call's limit: {CARRY_LIMIT})\n"
    with open(os.path.join(dest, "SIZES.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    sys.stdout.write(text)
    return total


def wheels(dest):
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    download(dest)
    build_deepspeed(dest)
    trim_bnb(dest)
    total = sizes(dest)
    if total > CARRY_LIMIT // 2:
        print(f"pack: the wheels take {total} bytes, more than half a call's 64 MiB", file=sys.stderr)
        return 1
    return 0


def needed_libs(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split("=>")
        if len(parts) != 2:
            continue
        name, path = parts[0].strip(), parts[1].split("(")[0].strip()
        if path and path != "not found" and not any(name.startswith(s) for s in SYSTEM_LIBS):
            libs.append(path)
    return libs


def pack_bin(build, dest):
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(dest, "lib"))
    libs = set()
    for b in ("ftrain", "ftest", "gpu_parity"):
        src = os.path.join(build, b)
        shutil.copy2(src, os.path.join(dest, b))
        subprocess.run(["strip", os.path.join(dest, b)], check=True)
        libs.update(needed_libs(src))
    for lib in sorted(libs):
        shutil.copy2(os.path.realpath(lib), os.path.join(dest, "lib", os.path.basename(lib)))
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(dest) for f in fs)
    archive = dest.rstrip("/") + ".tar.xz"
    with lzma.open(archive, "wb", preset=9 | lzma.PRESET_EXTREME) as xz, tarfile.open(fileobj=xz, mode="w") as t:
        t.add(dest, arcname=os.path.basename(dest.rstrip("/")))
    print(f"pack: {dest}: ftrain, ftest, gpu_parity and {len(libs)} libraries "
          f"({', '.join(sorted(os.path.basename(x) for x in libs))}), {total} bytes; "
          f"{archive}: {os.path.getsize(archive)} bytes")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "wheels":
        sys.exit(wheels(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "bin":
        sys.exit(pack_bin(sys.argv[2], sys.argv[3]))
    sys.exit("usage: pack.py wheels DEST | pack.py bin BUILD DEST")
