"""The one place where a worker's text is made fit to show: redaction, masking, printing. Pure.

What a refused worker printed is evidence, and it may hold a secret: a bearer token in a failed
request, a ``postgres://user:password@`` URL, a private key. Redis keeps it as printed (the spec's
``log``), but everything the operator shows elsewhere — Events, the Swarm's status, its own log,
the ``records`` views — goes through a :class:`Redactor` first. The same text also yields a
refusal's fingerprint, and both are the same kind of work, so both live here:

* :class:`Redactor` replaces what its patterns match with ``<redacted>``: the defaults below,
  the operator's own (``AGENTIHOOKS_SWARM_REDACT_PATTERNS``) and a Swarm's
  (``spec.redaction.patterns``). A pattern with a group named ``secret`` replaces only that group
  (``password=<redacted>`` stays readable). Each call reads at most :data:`INPUT_MAX` characters
  and a pattern with a nested quantifier is refused, so that no pattern can take exponential time.
* :func:`mask` replaces what varies between two Pods failing the same way (timestamps, and every
  token that holds a digit: ids, short hex runs, Pod-name suffixes, numbers, addresses), so the
  same cause gets the same fingerprint.
* :func:`printable` drops the control characters a terminal would obey (escape sequences,
  carriage returns, bidirectional overrides).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import string
from collections.abc import Iterable
from typing import Any, Final

# Re-exported: callers that compile patterns catch it from here.
from agentihooks_swarm.errors import InvalidPattern as InvalidPattern

#: What a redacted secret is replaced with.
REDACTED: Final = "<redacted>"
#: The most characters one call redacts (a stored log is at most 64 KiB); beyond, the text is cut,
#: so that no pattern runs over an unbounded input.
INPUT_MAX: Final = 128 * 1024
#: Bounds of the patterns a setting or a Swarm may add.
PATTERN_MAX: Final = 512
PATTERNS_MAX: Final = 32

#: The default patterns: common shapes of secrets, each with what it catches.
DEFAULT_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    (
        "private key block",
        r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]{0,8192}?-----END[A-Z0-9 ]{0,40} "
        r"PRIVATE KEY(?: BLOCK)?-----|[^\n]{0,8192})",
    ),
    ("JSON Web Token", r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
    ("URL with credentials", r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://(?P<secret>[^\s/?#@]+)@"),
    ("bearer token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    (
        "basic credentials",
        r"\b(?:[Bb]asic|BASIC)\s+(?P<secret>(?=[A-Za-z0-9]*(?:[0-9+/=]|[a-z][A-Z]))[A-Za-z0-9+/]{8,}={0,2})",
    ),
    (
        "password, token, secret or key pair",
        # The key ends with the word (``db_password``, ``client_secret``, ``AWS_SECRET_ACCESS_KEY``),
        # so that ``secretKeyRef.name: "x"`` or ``passwordFile=/path`` name no secret.
        r"(?i)(?:pass(?:word|wd|phrase)|pwd|token|secret|(?:api|access|secret|private|signing)[_-]?key|"
        r"credentials?|authorization)[\"']?\s{0,3}[=:]\s{0,3}[\"']?"
        # Not a value redacted already, nor an Authorization header's scheme (its own pattern's).
        r"(?P<secret>(?!<redacted>)(?!(?i:bearer|basic|digest|negotiate)\s)[^\s\"'&,;]+)",
    ),
    ("AWS access key id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
)

#: A group repeated inside a repeated group (``(a+)+``, ``(\w*)*``): the shape of a pattern that
#: may take exponential time on a line that almost matches.
_NESTED: Final = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*[+*{]")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """One pattern, checked: it compiles, is not over :data:`PATTERN_MAX` characters long, and
    repeats no repeated group. Raises :class:`InvalidPattern` saying which and why."""
    if len(pattern) > PATTERN_MAX:
        raise InvalidPattern(f"pattern {pattern[:40]!r}… is longer than {PATTERN_MAX} characters")
    if _NESTED.search(pattern):
        raise InvalidPattern(
            f"pattern {pattern!r} repeats a repeated group, which may take exponential time; "
            "repeat the inner part once"
        )
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InvalidPattern(f"pattern {pattern!r} is not a regular expression: {e}") from e


@dataclasses.dataclass(frozen=True)
class Redactor:
    """Compiled patterns; :meth:`redact` applies them in order."""

    patterns: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, extra: Iterable[str] = (), *, defaults: bool = True) -> Redactor:
        """The default patterns (unless ``defaults`` is false) and ``extra``, each checked (raises
        :class:`InvalidPattern`; at most :data:`PATTERNS_MAX` of them)."""
        added = [p for p in extra if p]
        if len(added) > PATTERNS_MAX:
            raise InvalidPattern(f"{len(added)} patterns; at most {PATTERNS_MAX} may be added")
        base = [p for _, p in DEFAULT_PATTERNS] if defaults else []
        return cls(patterns=tuple(compile_pattern(p) for p in [*base, *added]))

    def extended(self, extra: Iterable[str]) -> Redactor:
        """These patterns and ``extra`` (checked: raises :class:`InvalidPattern`)."""
        added = [p for p in extra if p]
        if not added:
            return self
        return Redactor(patterns=self.patterns + Redactor.of(added, defaults=False).patterns)

    def redact(self, text: str) -> str:
        """``text`` with every match replaced by :data:`REDACTED` (its ``secret`` group only, when
        the pattern has one); cut to :data:`INPUT_MAX` characters first."""
        if len(text) > INPUT_MAX:
            text = text[:INPUT_MAX] + " …(cut)"
        for pattern in self.patterns:
            text = pattern.sub(_replace, text)
        return text

    def redact_tree(self, value: Any) -> Any:
        """A JSON document with every string in it (keys too) redacted; a new document."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_tree(v) for v in value]
        return value


def _replace(match: re.Match[str]) -> str:
    if "secret" in match.re.groupindex and match.group("secret") is not None:
        start, end = match.span("secret")
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + REDACTED + whole[end - offset :]
    return REDACTED


#: The defaults alone: what every capture's fingerprint text is redacted with before it is stored.
DEFAULT: Final = Redactor.of()


class Redactors:
    """The operator's redactor (the defaults and its setting) and each Swarm's, which adds the
    Swarm's ``spec.redaction.patterns``: what a Swarm's Events and status are redacted with.

    A Swarm's patterns are learnt whenever the operator reads the Swarm (a launch, the status
    loop); a Swarm not read yet is redacted with the operator's patterns alone. A Swarm's patterns
    never reach another Swarm's text.
    """

    def __init__(self, base: Redactor = DEFAULT) -> None:
        self.base = base
        self._swarms: dict[tuple[str, str], Redactor] = {}

    def learn(self, *, namespace: str, slug: str, patterns: Iterable[str]) -> Redactor:
        """The Swarm's redactor from its (already checked) patterns, kept for :meth:`of`."""
        found = self.base.extended(patterns)
        if found is self.base:
            self._swarms.pop((namespace, slug), None)
        else:
            self._swarms[(namespace, slug)] = found
        return found

    def of(self, *, namespace: str, slug: str) -> Redactor:
        """The Swarm's redactor, or the operator's for a Swarm whose patterns are not known."""
        return self._swarms.get((namespace, slug), self.base)


class RedactingFilter(logging.Filter):
    """A log handler's filter that redacts each record's message (its arguments merged in: a
    worker's text reaches the log as an argument) and drops control characters from it."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg = printable(self.redactor.redact(message))
        record.args = None
        return True


def redact_logs(logger: logging.Logger, redactor: Redactor) -> None:
    """Redact everything ``logger``'s handlers write (the root logger's: the operator's log)."""
    for handler in logger.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(redactor))


# --- printing -------------------------------------------------------------------------------------

#: Unicode format characters that reorder what a terminal shows (the "trojan source" overrides).
_BIDI: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


#: Unicode's control characters (category ``Cc``, fixed by the standard: C0, DEL and C1) and the
#: overrides, as :meth:`str.translate` tables: dropped, but for newlines and tabs, kept or made
#: spaces. A table, not a loop over each character: this runs on every log line the operator writes.
_DROPPED: Final = {c: None for c in [*range(0x00, 0x20), *range(0x7F, 0xA0), *map(ord, _BIDI)]}
_KEEP_NEWLINES: Final = {**_DROPPED, ord("\n"): "\n", ord("\t"): "\t"}
_FLATTEN_NEWLINES: Final = {**_DROPPED, ord("\n"): " ", ord("\t"): " "}


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` without control characters (ESC and its sequences' introducer, CR, BEL, DEL, C1
    controls) and bidirectional overrides; newlines and tabs stay unless ``keep_newlines`` is false
    (then they become spaces)."""
    return text.translate(_KEEP_NEWLINES if keep_newlines else _FLATTEN_NEWLINES)


# --- fingerprint masking --------------------------------------------------------------------------

#: Placeholders of what :func:`mask` replaces.
TIME: Final = "<time>"
ID: Final = "<id>"
NAME: Final = "<name>"

_TIMES: Final = (
    re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b"),
    re.compile(r"\b\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?\b"),
    re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"),
)
#: A token: letters and digits, joined by ``-``, ``_`` or ``.`` (a Pod name, a request id
#: ``3fa9c2d1-7b2e``, an address ``10.0.0.7``, a version ``1.2.3``; ``:`` parts an address from its
#: port and an image from its tag, so ``r.example/app:<id>`` keeps its image's name). One that holds a digit
#: varies between Pods; all of it is one placeholder, whatever its parts look like, because a short
#: random part may come out all letters (``beef``) or all digits (``1234``) in one Pod only.
_TOKEN: Final = re.compile(r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+)*")
_SPACES: Final = re.compile(r"\s+")


def _token(match: re.Match[str]) -> str:
    token = match.group(0)
    return ID if any(c.isdigit() for c in token) else token


_ALNUM: Final = frozenset(string.ascii_letters + string.digits)


def _replace_token(text: str, name: str, placeholder: str) -> str:
    """``text`` with each whole-token ``name`` (no ASCII letter or digit on either side: an
    execution named ``e2`` is no part of an id ``0e2``) replaced, left to right as ``re.sub``
    would. A scan, not a pattern: each Pod's names differ, and a pattern built per name would be
    compiled per Pod (and push the ``re`` module's cache out)."""
    parts: list[str] = []
    start = 0
    found = text.find(name)
    while found >= 0:
        end = found + len(name)
        if (found == 0 or text[found - 1] not in _ALNUM) and (end == len(text) or text[end] not in _ALNUM):
            parts += (text[start:found], placeholder)
            start = end
            found = text.find(name, end)
        else:
            found = text.find(name, found + 1)
    parts.append(text[start:])
    return "".join(parts)


def mask(text: str, *, names: Iterable[str] = (), limit: int | None = None) -> str:
    """``text`` with what varies from Pod to Pod replaced: the given ``names`` (the Pod's, its
    execution's), timestamps, then every token that holds a digit; whitespace runs made one space
    and control characters dropped; cut to ``limit`` characters."""
    for name in sorted({n for n in names if n}, key=len, reverse=True):
        text = _replace_token(text, name, NAME)
    for pattern in _TIMES:
        text = pattern.sub(TIME, text)
    text = _TOKEN.sub(_token, text)
    text = _SPACES.sub(" ", printable(text, keep_newlines=False)).strip()
    return text[:limit] if limit is not None else text
