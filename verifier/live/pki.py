"""Throw-away mesh PKI for the embedded data plane, made with ``openssl`` at run time.

Nothing here is committed or reused: certificates live in the harness's
temporary directory for one run.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path

from verifier.orphans import die_with_parent


class Pki:
    """A throw-away mesh CA and SPIFFE workload certificates, made with ``openssl``.

    Generated at test time (never committed): one CA standing in for the mesh's
    trust bundle (SDS ``ROOTCA``), a certificate for the edge itself (SDS
    ``default``) and one per mesh workload, each with its SPIFFE ID as the only
    URI SAN, which is what the translator's SAN matcher pins. EC P-256 keys,
    one day of validity: fast to make, useless to steal.
    """

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca_cert = directory / "ca.crt"
        self.ca_key = directory / "ca.key"
        self._serial = 0

    async def _openssl(self, *args: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            "openssl",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.dir,
            preexec_fn=die_with_parent(),
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed:\n{out.decode(errors='replace')}")

    async def create(self) -> Pki:
        self.dir.mkdir(parents=True, exist_ok=True)
        await self._openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(self.ca_key), "-out", str(self.ca_cert), "-days", "1",
            "-subj", "/O=edge-verifier/CN=edge-verifier mesh root",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return self

    async def issue(self, name: str, spiffe_id: str) -> tuple[Path, Path]:
        """(certificate, key) for ``spiffe_id``, usable as TLS server and client."""
        self._serial += 1
        stem = f"{self._serial:03d}-{re.sub(r'[^A-Za-z0-9.-]', '_', name)}"
        key, csr, cert = (self.dir / f"{stem}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.dir / f"{stem}.ext"
        ext.write_text(
            f"subjectAltName=critical,URI:{spiffe_id}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyAgreement\n"
            "extendedKeyUsage=serverAuth,clientAuth\n",
            encoding="utf-8",
        )
        await self._openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/O=edge-verifier",
        )  # fmt: skip
        await self._openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key),
            "-set_serial", str(1000 + self._serial), "-days", "1", "-out", str(cert),
            "-extfile", str(ext),
        )  # fmt: skip
        return cert, key

    def server_context(self, cert: Path, key: Path) -> ssl.SSLContext:
        """Mutual TLS as a mesh workload does it: present our identity, demand one from the CA."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(self.ca_cert)
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx
