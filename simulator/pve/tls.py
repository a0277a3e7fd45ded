"""A per-host CA and a server certificate for the node's loopback IP (IP SAN), so clients verify TLS for real
(requests/proxmoxer with `verify=<ca.pem>`) instead of turning verification off.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def ensure_certs(api_dir: Path, address: str, node: str) -> None:
    """ca.pem / ca-key.pem and pve-ssl.pem / pve-ssl.key; kept if present so clients' trust survives `up`."""
    api_dir.mkdir(parents=True, exist_ok=True)
    ca_pem, ca_key_pem = api_dir / "ca.pem", api_dir / "ca-key.pem"
    cert_pem, key_pem = api_dir / "pve-ssl.pem", api_dir / "pve-ssl.key"
    if ca_pem.exists() and cert_pem.exists() and key_pem.exists():
        return
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Proxmox Virtual Environment ({node}) CA"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Manager CA (deploy sim)")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node}.local"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Node (deploy sim)")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=730))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address)),
                                                        x509.DNSName(node), x509.DNSName("localhost")]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_key(ca_key_pem, ca_key)
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(key_pem, key)
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
