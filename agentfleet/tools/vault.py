"""The credential vault: tasks name credentials, the transport fills them in at the last moment.

A task writes ``$CRED{vendor_a}`` in a header value or in the URL's path or query. Only the
guard transport (``agentfleet.tools.guard``) replaces it, on the copy of the request that goes
to the wire, and only when the request's host is allowed for that credential. So the value
never appears in task arguments, results, logs, or the request objects the task can see.

Domain rule, per entry of ``CredentialSpec.domains``:

- ``api.vendor.example`` allows exactly that host (any port);
- ``*.vendor.example`` allows every subdomain at any depth, but not ``vendor.example``
  itself (list both to allow both);
- an IP address allows a URL whose host is that literal address.

Names and entries are compared after the same normalisation as the SSRF guard (lower case,
IDNA, no trailing dot). A credential is sent over plain http only to a host opened by
``fetch.allow_private_hosts`` (local test servers); elsewhere https is required.

Placeholders in a request body are not filled in: they go out as written.

A credential's value (rather than its placeholder) in a request is held to the same domain
rule: ``carried`` finds it in any spelling ``agentfleet.tools.spellings`` knows, and the guard
refuses the request unless every credential it carries may go to its host. So a value that
an allowed host reflects into a redirect, or that a task copied from a response, cannot
follow to another host.

Each use is audited before the request is sent, so an attempt that then fails to connect is
still on record; if the audit cannot be written, the request is not sent.

Values are read from the source (environment variable or file, surrounding whitespace
stripped) at each use, so a rotated secret takes effect at once.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import quote, quote_plus

from agentfleet.config import CredentialSpec, Settings
from agentfleet.errors import ConfigError, ForbiddenDestination
from agentfleet.redaction import MIN_SECRET_CHARS
from agentfleet.tools.audit import AuditEntry, AuditLog
from agentfleet.tools.spellings import Needles, decoded_forms
from agentfleet.tools.ssrf import normalize_host

__all__ = [
    "PLACEHOLDER_RE",
    "AuditEntry",
    "AuditLog",
    "CredentialVault",
    "domain_allows",
    "normalize_domain_rule",
    "placeholder",
    "references",
]

_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}"
# Also the percent-encoded spelling, because URL parsers escape the braces.
PLACEHOLDER_RE = re.compile(rb"(?:\$|%24)CRED(?:\{|%7[Bb])(" + _NAME.encode() + rb")(?:\}|%7[Dd])")
_NAME_RE = re.compile(_NAME)


def placeholder(name: str) -> str:
    """How a task refers to the credential ``name``: ``$CRED{name}``."""
    return "$CRED{" + name + "}"


def references(data: bytes | str) -> list[str]:
    """The credential names referred to in ``data``, each once, in order of appearance."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    names: list[str] = []
    for match in PLACEHOLDER_RE.finditer(raw):
        name = match.group(1).decode("ascii")
        if name not in names:
            names.append(name)
    return names


def normalize_domain_rule(rule: str) -> str:
    """A ``domains`` entry in canonical form; ``ConfigError`` when it cannot be one."""
    text = rule.strip()
    wildcard = text.startswith("*.")
    body = text[2:] if wildcard else text
    shape = (
        f"credential domain {rule!r} must be a host name, '*.' and a domain, or an IP "
        "address (no scheme, port or path)"
    )
    if not body or "*" in body or "/" in body:
        raise ConfigError(shape)
    if ":" in body:
        try:
            ipaddress.IPv6Address(body.strip("[]"))
        except ValueError:
            raise ConfigError(shape) from None
        if wildcard:
            raise ConfigError(shape)
    try:
        host = normalize_host(body)
    except ForbiddenDestination as exc:
        raise ConfigError(f"credential domain {rule!r} is not a host name ({exc.message})") from None
    if wildcard and "." not in host:
        raise ConfigError(f"credential domain {rule!r} is too broad; name a registrable domain")
    return f"*.{host}" if wildcard else host


def domain_allows(rule: str, host: str) -> bool:
    """True when the canonical ``rule`` allows the normalised ``host`` (see module docs)."""
    if rule.startswith("*."):
        return host.endswith(rule[1:]) and len(host) > len(rule) - 1
    return host == rule


@functools.lru_cache(maxsize=256)
def _needles(value: str) -> Needles:
    return Needles.of(value)


def _header_safe(value: str) -> bool:
    return all(ch == "\t" or " " <= ch <= "~" for ch in value)


class CredentialVault:
    """Named credentials, their allowed domains, and the audit of every use.

    ``environ`` replaces ``os.environ`` as the source of ``env`` credentials (for tests).
    ``audit`` records each authorised use; without it uses are not recorded.
    """

    def __init__(
        self,
        specs: Mapping[str, CredentialSpec],
        *,
        audit: AuditLog | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._specs = dict(specs)
        self._rules: dict[str, list[str]] = {}
        for name, spec in self._specs.items():
            if not _NAME_RE.fullmatch(name):
                raise ConfigError(
                    f"credentials.{name}: a credential name uses letters, digits, '_', '.' "
                    "and '-', up to 64 characters"
                )
            self._rules[name] = [normalize_domain_rule(rule) for rule in spec.domains]
        self._audit = audit
        self._environ = environ
        self._last_values: dict[str, str] = {}

    @classmethod
    def from_settings(cls, settings: Settings, *, audit: AuditLog | None = None) -> CredentialVault:
        """The vault for ``settings.credentials``."""
        return cls(settings.credentials, audit=audit)

    @property
    def names(self) -> list[str]:
        """The configured credential names."""
        return sorted(self._specs)

    def check_domains(self, names: Iterable[str], host: str, *, as_value: bool = False) -> None:
        """Raise ``ForbiddenDestination`` unless every credential in ``names`` may go to ``host``.

        ``as_value`` says the request carries the credential's value itself, not its
        placeholder (the message says so). Nothing is audited and no value is read.
        """
        for name in dict.fromkeys(names):
            rules = self._rules.get(name)
            if rules is None:
                known = ", ".join(self.names) or "none"
                raise ForbiddenDestination(
                    f"credential {name!r} is not configured (known: {known})",
                    downstream=host,
                )
            if not any(domain_allows(rule, host) for rule in rules):
                what = f"credential {name!r}"
                if as_value:
                    what = f"the request carries the value of credential {name!r}, which"
                raise ForbiddenDestination(
                    f"{what} may not be sent to {host!r} (allowed: {', '.join(rules)})",
                    downstream=host,
                )

    def authorize(self, names: Iterable[str], host: str, *, secure: bool, task_id: str | None = None) -> None:
        """Check that every credential in ``names`` may go to ``host``, then audit each use.

        ``host`` is the normalised host of the request's URL; ``secure`` is True for https
        or a host opened by ``fetch.allow_private_hosts``. Nothing is audited unless all
        pass. Raises ``ForbiddenDestination`` naming the credential and host, never a value.
        """
        wanted = list(dict.fromkeys(names))
        self.check_domains(wanted, host)
        for name in wanted:
            if not secure:
                raise ForbiddenDestination(
                    f"credential {name!r} is only sent over https (plain http only to a host "
                    "opened by fetch.allow_private_hosts)",
                    downstream=host,
                )
        if self._audit is not None:
            for name in wanted:
                self._audit.record(task_id, name, host)

    def value(self, name: str) -> str:
        """The current value of ``name`` from its source. Only the guard transport calls this.

        Raises ``ForbiddenDestination`` for an unknown name and ``ConfigError`` (naming the
        variable or file, never a value) when the source is missing or empty.
        """
        value = self._read(name)
        self._last_values[name] = value
        return value

    def _read(self, name: str) -> str:
        spec = self._specs.get(name)
        if spec is None:
            raise ForbiddenDestination(f"credential {name!r} is not configured")
        if spec.env is not None:
            environ = os.environ if self._environ is None else self._environ
            raw = environ.get(spec.env)
            where = f"environment variable {spec.env}"
        else:
            path = Path(spec.file or "")
            try:
                raw = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"credentials.{name}: cannot read file {path} ({exc.strerror})") from None
            where = f"file {path}"
        value = (raw or "").strip()
        if not value:
            raise ConfigError(f"credentials.{name}: {where} is not set or empty")
        return value

    def substitute(self, data: bytes, *, in_url: bool) -> bytes:
        """``data`` with every placeholder replaced by its value.

        In a URL the value is percent-encoded; in a header value it must be printable ASCII
        (else ``ConfigError``). Call only after ``authorize`` for the same names and host.
        """

        def fill(match: re.Match[bytes]) -> bytes:
            name = match.group(1).decode("ascii")
            secret = self.value(name)
            if in_url:
                return quote(secret, safe="").encode("ascii")
            if not _header_safe(secret):
                raise ConfigError(f"credentials.{name}: the value has characters an HTTP header cannot hold")
            return secret.encode("ascii")

        return PLACEHOLDER_RE.sub(fill, data)

    def carried(self, parts: Iterable[bytes], *, decoded: Iterable[bytes] = ()) -> list[str]:
        """The names of the credentials whose value appears in ``parts`` (in any spelling).

        ``parts`` are raw request bytes (URL, headers, body), searched also percent- and
        form-decoded; ``decoded`` are bytes already decoded (an Authorization header's base64
        payload). Values shorter than ``MIN_SECRET_CHARS`` and sources that cannot be read
        are skipped. The current value and the last one used are both looked for, so a
        value rotated since it was sent is still recognised.
        """
        haystacks = [form for part in parts if part for form in decoded_forms(part)]
        haystacks.extend(decoded)
        found: list[str] = []
        for name in self._specs:
            candidates = {self._last_values.get(name, "")}
            with contextlib.suppress(ConfigError, ForbiddenDestination):
                candidates.add(self._read(name))
            if any(
                len(value) >= MIN_SECRET_CHARS and _needles(value).found_in(haystacks)
                for value in candidates
            ):
                found.append(name)
        return found

    def scrub(self, text: str) -> str:
        """``text`` with each known value (plain or percent-encoded) put back as its placeholder."""
        pairs: list[tuple[str, str]] = []
        for name in self._specs:
            candidates = {self._last_values.get(name, "")}
            with contextlib.suppress(ConfigError, ForbiddenDestination):
                candidates.add(self.value(name))
            for value in candidates:
                if value:
                    for form in {value, quote(value, safe=""), quote_plus(value, safe="")}:
                        pairs.append((form, placeholder(name)))
        for form, marker in sorted(pairs, key=lambda pair: len(pair[0]), reverse=True):
            text = text.replace(form, marker)
        return text
