"""A token issuer for load runs of a tenant with `auth`: makes an RSA-2048 key (openssl),
writes an RS256 access token for the audience to <dir>/token (valid an hour), and serves the
key set as JSON Web Keys at http://127.0.0.1:<port>/jwks until killed.

    python3 loadtest/issuer.py <dir> <port> <issuer> <audience>

Python's standard library and the openssl command only; binds to 127.0.0.1.
"""

import base64
import http.server
import json
import os
import subprocess
import sys
import time


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def main() -> None:
    work, port, issuer, audience = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    key = os.path.join(work, "issuer-key.pem")
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True, capture_output=True)
    modulus = subprocess.run(
        ["openssl", "rsa", "-in", key, "-noout", "-modulus"],
        check=True, capture_output=True, text=True,
    ).stdout.strip().split("=", 1)[1]
    jwks = json.dumps({"keys": [{
        "kty": "RSA", "kid": "load", "use": "sig", "alg": "RS256",
        "n": b64url(bytes.fromhex(modulus)), "e": b64url((65537).to_bytes(3, "big")),
    }]}).encode()

    now = int(time.time())
    header = b64url(json.dumps({"alg": "RS256", "typ": "at+jwt", "kid": "load"}).encode())
    claims = b64url(json.dumps({
        "iss": issuer, "sub": "load", "aud": audience, "iat": now, "exp": now + 3600,
        "scope": "mcp",
    }).encode())
    signing_input = f"{header}.{claims}".encode()
    signature = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", key],
        input=signing_input, check=True, capture_output=True,
    ).stdout

    class Jwks(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            if self.path != "/jwks":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(jwks)))
            self.end_headers()
            self.wfile.write(jwks)

        def log_message(self, *args) -> None:
            pass

    # The token is in place before the port listens: whoever waits for the port finds it.
    token = os.path.join(work, "token")
    with open(token + ".tmp", "w") as f:
        f.write(f"{header}.{claims}.{b64url(signature)}\n")
    os.replace(token + ".tmp", token)
    http.server.HTTPServer(("127.0.0.1", port), Jwks).serve_forever()


if __name__ == "__main__":
    main()
