"""The webhook's TLS: our own SSLContext (TLS 1.2 with AEAD suites, or 1.3 only) whose certificate is
reloaded on change.

uvicorn builds its context once and has no minimum-version setting, and cert-manager rotates the
mounted Secret files in place; so kv-planner owns the context and calls ``load_cert_chain`` on the live
context when the files change, which applies to every handshake after it.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from pathlib import Path

from planner.errors import PlannerInputError

log = logging.getLogger("kv_planner.webhook.tls")
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def _stamp(*paths: Path) -> tuple[tuple[int, int, int], ...]:
    """(mtime_ns, size, inode) of each file, following symlinks (Secret volumes swap a ..data link)."""
    stamps = []
    for path in paths:
        st = os.stat(path)
        stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(stamps)


class ReloadingTLS:
    """A server SSLContext for ``cert_file``/``key_file`` that reloads them when they change."""

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        *,
        client_ca_file: str | os.PathLike[str] | None = None,
        minimum_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = minimum_version
        # TLS 1.2 only with forward-secret AEAD suites (no CBC, no RSA key exchange); TLS 1.3 suites are
        # all AEAD and are not affected by set_ciphers.
        self.context.set_ciphers(TLS12_CIPHERS)
        self.context.options |= ssl.OP_NO_COMPRESSION
        if client_ca_file is not None:
            # Optional mTLS for clusters whose API server presents a client certificate.
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(cafile=str(client_ca_file))
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self.generation = 0
        self.reload(initial=True)

    def reload(self, *, initial: bool = False) -> bool:
        """Load the files if they changed since the last load; True when a new chain is in force.

        A half-written rotation (cert and key that do not match) keeps the previous chain.
        """
        with self._lock:
            try:
                stamp = _stamp(self.cert_file, self.key_file)
            except OSError as error:
                if initial:
                    raise PlannerInputError(f"cannot read the TLS files: {error}") from None
                log.warning("TLS files unreadable (%s); keeping the current certificate", error)
                return False
            if stamp == self._stamp:
                return False
            try:
                self.context.load_cert_chain(str(self.cert_file), str(self.key_file))
            except (ssl.SSLError, OSError) as error:
                if initial:
                    raise PlannerInputError(f"cannot load the TLS certificate/key: {error}") from None
                log.warning("TLS reload failed (%s); keeping the current certificate", error)
                return False
            self._stamp = stamp
            self.generation += 1
            if not initial:
                log.info("TLS certificate reloaded from %s", self.cert_file)
            return True
