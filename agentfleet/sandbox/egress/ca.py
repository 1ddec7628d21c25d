"""The per-worker certificate authority that lets the egress proxy read a sandbox's HTTPS.

A worker process makes one CA the first time a sandbox needs it (again after a fork: a child
never shares its parent's). Its certificate is written, world-readable, to a directory of its
own that the sandbox binds read-only (``/run/agentfleet/egress-ca.pem`` inside); its private
key is never written anywhere: it stays in the worker's memory.

For each host a sandbox opens a tunnel to, ``LeafCertificates.context(host)`` gives a server
``ssl.SSLContext`` with a certificate for that name (or address) signed by the CA. The leaves
share one key made with the CA; ``ssl`` loads a certificate chain only from files, so each
leaf's key and certificate are written to a 0600 file in a 0700 directory, loaded, and the
file removed at once. Contexts are cached (least recently used dropped first).
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CA_VALID_DAYS", "LeafCertificates", "WorkerCA", "worker_ca"]

CA_VALID_DAYS = 30
_LEAF_VALID_DAYS = 7
_BACKDATE = datetime.timedelta(hours=1)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class WorkerCA:
    """A CA made in this process: ``cert_path`` holds its certificate (PEM); the key is memory only."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    leaf_key: ec.EllipticCurvePrivateKey
    directory: Path
    cert_path: Path

    @classmethod
    def create(cls) -> WorkerCA:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "agentfleet"),
                x509.NameAttribute(
                    NameOID.COMMON_NAME, f"agentfleet egress CA {socket.gethostname()[:20]} {os.getpid()}"
                ),
            ]
        )
        public = key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _BACKDATE)
            .not_valid_after(_now() + datetime.timedelta(days=CA_VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        directory = Path(tempfile.mkdtemp(prefix="agentfleet-egress-ca-"))
        os.chmod(directory, 0o755)
        cert_path = directory / "egress-ca.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        os.chmod(cert_path, 0o644)
        return cls(cert, key, ec.generate_private_key(ec.SECP256R1()), directory, cert_path)

    def issue(self, host: str) -> x509.Certificate:
        """A server certificate for ``host`` (a DNS name or an IP address), signed by this CA."""
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        public = self.leaf_key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.cert.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _BACKDATE)
            .not_valid_after(_now() + datetime.timedelta(days=_LEAF_VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    def remove(self) -> None:
        """Remove the certificate's directory (the process is done with this CA)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


_lock = threading.Lock()
_current: tuple[int, WorkerCA] | None = None


def worker_ca() -> WorkerCA:
    """This process's CA, made at first use (a forked child makes its own); its certificate's
    directory is removed when the process exits."""
    global _current
    with _lock:
        if _current is None or _current[0] != os.getpid():
            made = WorkerCA.create()
            _current = (os.getpid(), made)
            atexit.register(_remove_if_mine, os.getpid(), made)
        return _current[1]


def _remove_if_mine(pid: int, ca: WorkerCA) -> None:
    # A forked child inherits its parent's exit handlers: only the maker removes its CA.
    if os.getpid() == pid:
        ca.remove()


class LeafCertificates:
    """Server TLS contexts for the hosts a sandbox tunnels to, at most ``capacity`` kept."""

    def __init__(self, ca: WorkerCA, *, capacity: int) -> None:
        self._ca = ca
        self._capacity = capacity
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._lock = threading.Lock()

    def context(self, host: str) -> ssl.SSLContext:
        """The server context presenting a certificate for ``host``."""
        with self._lock:
            found = self._contexts.get(host)
            if found is not None:
                self._contexts.move_to_end(host)
                return found
        made = self._make(host)
        with self._lock:
            self._contexts[host] = made
            while len(self._contexts) > self._capacity:
                self._contexts.popitem(last=False)
        return made

    def _make(self, host: str) -> ssl.SSLContext:
        cert = self._ca.issue(host)
        pem = self._ca.leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ) + cert.public_bytes(serialization.Encoding.PEM)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        private = tempfile.mkdtemp(prefix="agentfleet-egress-leaf-")
        try:
            path = os.path.join(private, "leaf.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(pem)
            context.load_cert_chain(path)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        return context
