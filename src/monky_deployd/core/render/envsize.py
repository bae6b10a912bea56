"""Whether a container could start with the rendered ``.env`` as its environment. Pure.

A service that names the ``.env`` in ``env_file`` gets every one of its variables in its process
environment. Linux's ``execve`` refuses (E2BIG, "argument list too long") an environment whose
strings (``NAME=value`` and a NUL each) and their pointers (8 bytes each), with the command line,
exceed a quarter of the stack limit: 2 MiB with the default 8 MiB stack that containers inherit.
Measured with the engine here: 17,000 variables of 118 bytes (2.08 MiB with pointers) end the
container at once with ``exec /bin/true: argument list too long``; 16,000 (1.80 MiB) start. And
the engine's container start is itself superlinear in the number of variables (20,000: 1.5 s,
40,000: 8.6 s; bench/README.md), so a template of 190,000 one-word lines spent minutes in
``up`` before the container failed. The agent refuses such a ``.env`` with ``ENV_TOO_LARGE``
before anything on the box changes, naming the figures, never a value.

``EXEC_HEADROOM_BYTES`` leaves room for what the engine and the image add to the environment
(``PATH``, ``HOSTNAME``, the image's ``ENV``) and for the command line.
"""

from __future__ import annotations

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import EnvError
from monky_deployd.core.render.dotenv import parse

EXEC_LIMIT_BYTES = 2 * 1024 * 1024  # a quarter of the default 8 MiB stack (execve's bound)
EXEC_HEADROOM_BYTES = 64 * 1024  # the engine's and the image's own variables, the command line
ENV_BUDGET_BYTES = EXEC_LIMIT_BYTES - EXEC_HEADROOM_BYTES
POINTER_BYTES = 8  # each string's pointer in the new process's envp
# A line of the .env takes at least 2 characters and its newline ("K=") and adds at most its own
# bytes plus the NUL and the pointer to the environment (decoding only shrinks a value), so a
# file this short cannot overflow the budget and is not read again.
_SHORT_ENOUGH = ENV_BUDGET_BYTES // 4


def environment_bytes(env_text: str) -> tuple[int, int]:
    """(bytes, variables) the ``.env``'s variables take of a new process's environment: each
    distinct name once (Compose keeps the last assignment), ``NAME=value``, its NUL, its
    pointer."""
    sizes: dict[str, int] = {}
    for a in parse(env_text):
        if a.parts is None:  # a plain line: ASCII, no quotes, no escapes
            value = a.end - a.start
        else:
            literal = "".join(text if not ref else "${" + text + "}" for text, ref in a.parts)
            value = len(literal.replace("$$", "$").encode("utf-8", "surrogatepass"))
        sizes[a.name] = len(a.name.encode("utf-8", "surrogatepass")) + 1 + value
    return sum(sizes.values()) + len(sizes) * (1 + POINTER_BYTES), len(sizes)


def check(env_text: str, takes_env: tuple[str, ...]) -> None:
    """Refuse (``ENV_TOO_LARGE``) a ``.env`` no service in ``takes_env`` (the services that name
    it in ``env_file``) could start with."""
    if not takes_env or len(env_text) <= _SHORT_ENOUGH:
        return
    size, count = environment_bytes(env_text)
    if size <= ENV_BUDGET_BYTES:
        return
    raise EnvError(
        f"the .env's {count} variables would take {size} bytes of the environment of "
        f"{', '.join(takes_env)} (env_file), over the {ENV_BUDGET_BYTES} bytes a process can "
        f"start with (Linux refuses more than {EXEC_LIMIT_BYTES} bytes of environment and "
        "command line: 'argument list too long')",
        code=Code.ENV_TOO_LARGE,
        hint="the bundle's env_template: fewer or shorter variables, or feed them to the compose "
        "file by ${NAME} instead of env_file",
    )
