#!/usr/bin/env python3
"""Write the linker's symbol ordering file from a traced run.

Usage: link/order_symbols.py BINARY MAP TRACE... > link/trigd.order

BINARY is the static trigd that was traced, MAP its LLD link map
(`-Map`, what `TRIGD_LINK_MAP` asks build.rs for), each TRACE valgrind
lackey's `--trace-superblocks=yes` log of a run of BINARY. Every address
a run executed is mapped to the input section of `.text` holding it;
the output names one symbol of each such section, in the order the runs
first reached them (the first run's order, then what later runs added:
threads interleave differently from run to run), so the linker lays that
code out together.

Code chosen by the CPU at run time is added beside what valgrind's CPU
ran: every ISA variant of a libc string function (valgrind has no
AVX-512, so glibc picks another variant there than on most servers) and
the x86 back ends of sha1/sha2 (SHA-NI, which valgrind lacks); and
`strcmp`, which glibc's start-up runs natively to find the kernel's vDSO
(valgrind offers none). Called by link/order-symbols.sh.
"""
import bisect
import re
import struct
import sys

LINE = re.compile(r'^\s*([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+(\d+)\s(\s*)(.*)$')
RUST_SECTION = re.compile(r':\(\.text\.(?:(?:unlikely|hot|startup|exit)\.)?(_[ZR]\w*[^)]*)\)$')
LIBC_VARIANT = re.compile(r'libc\.a\(([a-z0-9_]+)-[\w-]*?(?:sse|avx|evex|erms|rtm|movbe)[\w-]*\.o\)')
# libc string functions run natively but not under valgrind (the vDSO lookup)
NATIVE_LIBC = ['strcmp']
# (prefix of a function valgrind runs, prefix of the functions a real CPU
# may run instead)
DISPATCH = [
    ('_ZN4sha26sha256', '_ZN4sha26sha2563x86'),
    ('_ZN4sha26sha512', '_ZN4sha26sha5123x86'),
    ('_ZN4sha18compress', '_ZN4sha18compress3x86'),
]


def text_sections(path):
    """[start, size, input section, first symbol] of every .text input section."""
    sections, output = [], None
    for line in open(path, encoding='utf-8', errors='replace'):
        m = LINE.match(line)
        if not m:
            continue
        addr, size, indent, name = int(m[1], 16), int(m[3], 16), len(m[5]), m[6]
        if indent == 0:
            output = name
        elif output != '.text':
            continue
        elif indent <= 8 and '(' in name:
            sections.append([addr, size, name, None])
        elif sections and sections[-1][3] is None:
            sections[-1][3] = name
    sections.sort(key=lambda s: s[0])
    return sections


def symbol(section):
    """The name to give the linker for an input section."""
    m = RUST_SECTION.search(section[2])
    return m[1] if m else section[3]


def entry_point(binary):
    with open(binary, 'rb') as f:
        header = f.read(32)
    return struct.unpack_from('<Q', header, 24)[0]


def reached(sections, trace, entry, order, seen):
    """Appends to ORDER the sections TRACE executed that SEEN lacks, in
    first-reached order."""
    starts = [s[0] for s in sections]
    base = None
    for line in open(trace):
        if not line.startswith('SB '):
            continue
        addr = int(line[3:], 16)
        if base is None:
            base = addr - entry  # the first superblock is the entry point
        addr -= base
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < sections[i][0] + max(sections[i][1], 1) and i not in seen:
            seen.add(i)
            order.append(i)


def with_variants(sections, order):
    """ORDER with, after each section, the CPU-chosen alternatives of it."""
    out, seen = [], set()
    for i in order:
        for j in [i] + alternatives(sections, i):
            if j not in seen:
                seen.add(j)
                out.append(j)
    return out


def alternatives(sections, i):
    name = sections[i][2]
    m = LIBC_VARIANT.search(name)
    if m:
        stem = m[1]
        return [j for j, s in enumerate(sections)
                if (v := LIBC_VARIANT.search(s[2])) and v[1] == stem]
    sym = symbol(sections[i]) or ''
    for ran, instead in DISPATCH:
        if sym.startswith(ran):
            return [j for j, s in enumerate(sections) if (symbol(s) or '').startswith(instead)]
    return []


def main():
    binary, map_path, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
    sections = text_sections(map_path)
    order, seen = [], set()
    for trace in traces:
        reached(sections, trace, entry_point(binary), order, seen)
    native = [j for j, s in enumerate(sections)
              if (v := LIBC_VARIANT.search(s[2])) and v[1] in NATIVE_LIBC]
    order = with_variants(sections, order + native[:1])
    names, size = [], 0
    for i in order:
        name = symbol(sections[i])
        if name and name not in names:
            names.append(name)
            size += sections[i][1]
    print('# link/trigd.order: the code trigd runs from start-up to idle, in the')
    print('# order it first runs; made by link/order-symbols.sh, read by build.rs.')
    print('\n'.join(names))
    print(f'order_symbols: {len(names)} functions, {size // 1024} KiB of code', file=sys.stderr)


if __name__ == '__main__':
    main()
