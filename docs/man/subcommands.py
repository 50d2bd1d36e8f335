#!/usr/bin/env python3
"""Writes a help2man include file whose SUBCOMMANDS section holds each subcommand's
own --help, verbatim, so that a program's man page documents every subcommand.

    subcommands.py OUT BINARY SUBCOMMAND... [-- EXTRA.h2m]

EXTRA.h2m (hand-written sections: DESCRIPTION, FILES, EXAMPLES, SEE ALSO) is
appended as it is."""

import subprocess
import sys


def roff_verbatim(text):
    lines = []
    for line in text.rstrip("\n").splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def main():
    out, binary, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    extra = []
    if "--" in rest:
        i = rest.index("--")
        rest, extra = rest[:i], rest[i + 1:]
    parts = []
    if rest:
        parts.append("[SUBCOMMANDS]")
        for sub in rest:
            run = subprocess.run([binary, sub, "--help"], capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"subcommands.py: {binary} {sub} --help failed ({run.returncode}): {run.stderr}")
            # The usage line names the build directory's path: the installed name instead.
            help_text = run.stdout.replace(binary, binary.rsplit("/", 1)[-1])
            parts.append(f'.SS "{sub}"\n.nf\n{roff_verbatim(help_text)}\n.fi')
    for path in extra:
        with open(path) as f:
            parts.append(f.read().rstrip("\n"))
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
