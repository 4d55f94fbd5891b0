"""What an image built from deploy/docker/Dockerfile holds, read from the Dockerfile alone.

No Docker engine runs here, so tests/service_tests/test_deploy.py checks the Dockerfile and
the recipes that name paths in its image by replaying the Dockerfile's steps over a model
of the image's file system: `COPY` from the build context (the file must be there, and
sent by Dockerfile.dockerignore) or from an earlier stage, `WORKDIR`, `mkdir -p`, `ln -s`,
the console scripts `pip install` of the wheel puts on PATH, and what the base image and
the Debian packages installed provide (the tables below: what a step of the Dockerfile
relies on must be written down here, and so reviewed). A path is in the image when a step
made it, or lies under a directory a step copied and the source has it.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# What the base image provides that the Dockerfile relies on (python:3.11-slim-bookworm).
BASE_PATHS = {
    "python": {"/usr/local/bin/python", "/usr/local/bin/pip", "/bin/bash", "/usr/bin/bash",
               "/bin/sh", "/usr/bin/env", "/usr/sbin/nologin", "/tmp", "/usr/share/man",
               "/var/lib/apt/lists"},
}

# What each Debian package the Dockerfile installs provides, of what the image uses.
APT_PATHS = {
    "openjdk-17-jre-headless": {"/usr/bin/java"},
    "procps": {"/usr/bin/ps"},
    "tini": {"/usr/bin/tini"},
    "libnss-wrapper": set(),  # a library found by glob at run time (entrypoint.sh)
}


@dataclass
class Step:
    """One instruction of a Dockerfile: its stage, keyword, arguments and first line."""

    stage: str
    keyword: str
    args: str
    line: int


def dockerfile_steps(path: Path) -> list[Step]:
    """The instructions of a Dockerfile, continuation lines joined and comments left out."""
    logical: list[tuple[int, str]] = []
    text, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # a comment, also between the lines of one instruction
        if not text:
            start = number
        if line.endswith("\\"):
            text += line[:-1] + " "
            continue
        logical.append((start, text + line))
        text = ""
    steps, stage = [], ""
    for number, instruction in logical:
        keyword, _, args = instruction.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            named = re.search(r"\sAS\s+(\S+)", args, re.I)
            stage = named.group(1) if named else f"stage{sum(s.keyword == 'FROM' for s in steps)}"
        steps.append(Step(stage, keyword, args.strip(), number))
    return steps


def dockerignore_sends(patterns_file: Path, relative: str) -> bool:
    """Whether the build context sends `relative` (a path from the context's root): the last
    pattern matching it or one of its parent folders decides, `!` re-including."""
    sent = True
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns_file.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        keep = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(c) for c in candidates):
            sent = keep
    return sent


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


@dataclass
class Image:
    """The model of one stage's file system: each path a step made, with what a copied or
    linked directory holds (a local directory to look in, or the relative paths it has)."""

    made: dict[str, Path | frozenset[str] | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)

    def add(self, path: str, content: Path | frozenset[str] | None = None) -> None:
        """Record that a step made `path` (holding `content`, if a directory)."""
        self.made[posixpath.normpath(path)] = content

    def has(self, path: str) -> bool:
        """Whether `path` (globs allowed in its last parts) is in the image."""
        path = posixpath.normpath(self.expand(path))
        if any(fnmatch.fnmatchcase(made, path) for made in self.made):
            return True
        if any(made.startswith(path.rstrip("/") + "/") for made in self.made):
            return True  # a directory holding something made
        for made, content in self.made.items():
            if content is None or not path.startswith(made + "/"):
                continue
            rest = path[len(made) + 1:]
            if isinstance(content, Path):
                if any(content.glob(rest)):
                    return True
            elif any(fnmatch.fnmatchcase(c, rest) for c in content):
                return True
        return False

    def expand(self, text: str) -> str:
        """`$NAME` and `${NAME}` replaced by the image's ENV so far."""
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.env.get(m.group(1), m.group(0)), text)

    def absolute(self, path: str) -> str:
        """`path` as the image resolves it: relative paths from the WORKDIR."""
        return posixpath.normpath(posixpath.join(self.workdir, self.expand(path)))


@dataclass
class Replay:
    """The stages of a Dockerfile replayed (`replay`), and every problem found on the way."""

    stages: dict[str, Image]
    final: Image
    problems: list[str]


def replay(dockerfile: Path, context: Path, *, links: dict[str, Path | frozenset[str]],
           wheel_name: str) -> Replay:
    """Replay `dockerfile` over the build `context`. `links` says what each directory that
    a RUN step links (`ln -s`) holds; `wheel_name` is the file `pip wheel` writes."""
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    scripts = tomllib.loads((context / "pyproject.toml").read_text())["project"]["scripts"]
    stages: dict[str, Image] = {}
    problems: list[str] = []
    args: dict[str, str] = {}
    image = Image()
    for step in dockerfile_steps(dockerfile):
        where = f"{dockerfile.name}:{step.line} {step.keyword}"
        if step.keyword == "ARG" and step.stage == "":
            name, _, default = step.args.partition("=")
            args[name] = default
        elif step.keyword == "FROM":
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""),
                          step.args.split()[0])
            image = Image()
            stages[step.stage] = image
            if base in stages:
                image.made = dict(stages[base].made)
            else:
                family = base.split(":")[0].split("/")[-1]
                if family not in BASE_PATHS:
                    problems.append(f"{where}: no BASE_PATHS entry for base image {base}")
                for path in BASE_PATHS.get(family, ()):
                    image.add(path)
        elif step.keyword == "WORKDIR":
            image.workdir = image.absolute(step.args)
            image.add(image.workdir)
        elif step.keyword == "ENV":
            for name, value in (item.split("=", 1) for item in shlex.split(step.args)):
                image.env[name] = image.expand(value)
                if value.startswith("/") and not image.has(value):
                    problems.append(f"{where}: {name}={value}, which no earlier step made")
        elif step.keyword == "USER":
            image.user = step.args
        elif step.keyword == "COPY":
            _copy(step, image, stages, context, ignore, problems, where)
        elif step.keyword == "RUN":
            _run(step.args, image, links, scripts, wheel_name, problems, where)
        elif step.keyword in ("ENTRYPOINT", "CMD"):
            command = json.loads(step.args)
            setattr(image, step.keyword.lower(), command)
            # CMD's arguments may name what a run mounts: the tests check those.
            for part in command if step.keyword == "ENTRYPOINT" else ():
                if part.startswith("/") and not image.has(part):
                    problems.append(f"{where}: {part}, which no earlier step made")
    return Replay(stages, image, problems)


def _copy(step: Step, image: Image, stages: dict[str, Image], context: Path, ignore: Path,
          problems: list[str], where: str) -> None:
    words = shlex.split(step.args)
    options = [w for w in words if w.startswith("--")]
    *sources, dest = [w for w in words if not w.startswith("--")]
    source_stage = next((o.split("=", 1)[1] for o in options if o.startswith("--from=")), None)
    target = image.absolute(dest)
    into_folder = dest.endswith("/") or len(sources) > 1
    for source in sources:
        landing = posixpath.join(target, posixpath.basename(source)) if into_folder else target
        if source_stage is not None:
            earlier = stages.get(source_stage)
            if earlier is None or not earlier.has(source):
                problems.append(f"{where}: {source} is not in stage {source_stage}")
                continue
            prefix = posixpath.normpath(source)
            for made, content in earlier.made.items():
                if made == prefix or made.startswith(prefix + "/"):
                    image.add(landing + made[len(prefix):], content)
            continue
        local = context / source
        if not local.exists():
            problems.append(f"{where}: {source} is not in the build context")
            continue
        files = [local] if local.is_file() else [p for p in local.rglob("*") if p.is_file()]
        unsent = [str(f.relative_to(context)) for f in files
                  if "__pycache__" not in f.parts
                  and not dockerignore_sends(ignore, str(f.relative_to(context)))]
        if unsent:
            problems.append(f"{where}: {ignore.name} leaves out {unsent[:3]}")
        image.add(landing, local if local.is_dir() else None)


def _run(command: str, image: Image, links: dict[str, Path | frozenset[str]],
         scripts: dict[str, str], wheel_name: str, problems: list[str], where: str) -> None:
    # Substitutions, $(...), compute a value inside the step; they name nothing to check.
    plain = _without_substitutions(command)
    used: list[str] = []  # the paths the segment's command uses
    for segment in re.split(r"&&|;|\|\|", plain):
        words = shlex.split(segment)
        while words and re.match(r"^\w+=", words[0]):
            words = words[1:]  # NAME=value before the program
        if not words:
            continue
        program, rest = words[0], words[1:]
        if program.startswith("/"):
            used.append(program)
        if program in ("apt-get", "apt") and "install" in rest:
            for package in (w for w in rest[rest.index("install") + 1:] if not w.startswith("-")):
                if package not in APT_PATHS:
                    problems.append(f"{where}: no APT_PATHS entry for package {package}")
                for path in APT_PATHS.get(package, ()):
                    image.add(path)
        elif program == "mkdir":
            for path in rest:
                if not path.startswith("-"):
                    image.add(image.absolute(path))
        elif program == "ln" and rest and rest[0].startswith("-s"):
            *targets, name = [w for w in rest if not w.startswith("-")]
            made = [image.absolute(name)] if len(targets) == 1 and not name.endswith("/") \
                else [posixpath.join(image.absolute(name), posixpath.basename(t))
                      for t in targets]
            for link in made:
                if link not in links:
                    problems.append(f"{where}: links {link}; say what it holds (links=)")
                image.add(link, links.get(link))
        elif program == "pip" and "wheel" in rest:
            folder = rest[rest.index("--wheel-dir") + 1] if "--wheel-dir" in rest else "."
            image.add(posixpath.join(image.absolute(folder), wheel_name))
        elif program == "pip" and "install" in rest:
            for name in scripts:
                image.add(f"/usr/local/bin/{name}")
        if program == "rm":  # what rm removes need not have been there
            for gone in (image.absolute(w) for w in rest if not w.startswith("-")):
                for made in [m for m in image.made
                             if fnmatch.fnmatchcase(m, gone) or m.startswith(gone + "/")]:
                    del image.made[made]
        elif program not in ("mkdir", "ln", "useradd"):  # these make what they name
            used += [w for w in rest if w.startswith("/")]
        for path in used:  # what a command uses must be there by the time it runs
            if not image.has(path):
                problems.append(f"{where}: {program} uses {path}, which no earlier step made")
        used.clear()


def _without_substitutions(command: str) -> str:
    out, i = "", 0
    while i < len(command):
        if command.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(command) and depth:
                depth += {"(": 1, ")": -1}.get(command[j], 0)
                j += 1
            out, i = out + "SUBST", j
        else:
            out, i = out + command[i], i + 1
    return out
