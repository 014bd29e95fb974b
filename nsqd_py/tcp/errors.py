"""Protocol V2 error replies: `<CODE> <description>` frames, fatal ones close the connection."""

from __future__ import annotations


class ClientError(Exception):
    """An error the client caused; sent as an error frame. Only FIN/REQ/TOUCH failures are non-fatal."""

    fatal = False

    def __init__(self, code: str, description: str) -> None:
        super().__init__(f"{code} {description}")
        self.code = code
        self.description = description

    @property
    def payload(self) -> bytes:
        return f"{self.code} {self.description}".encode("utf-8", "surrogateescape")


class FatalClientError(ClientError):
    """Sent, then the connection is closed."""

    fatal = True


def client_text(raw: bytes) -> str:
    """Bytes a client sent, for an error text that echoes them: Go echoes them unchanged, so invalid UTF-8
    is kept (as surrogate escapes that ``payload`` turns back into the same bytes)."""
    return raw.decode("utf-8", "surrogateescape")
