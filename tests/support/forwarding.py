"""Bytes between sockets, for the tests that stand between an operator and the API server."""

from __future__ import annotations

import socket
import threading


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until either end closes; then shut both down (the other direction ends too)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Forwarder:
    """A TCP forwarder on loopback to `upstream` that can be cut off (its connections too)
    and restored on the same port: on a free port of 127.0.0.1, or at `listen`."""

    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] | None = None) -> None:
        self.upstream = upstream
        self.host, self.port = listen or ("127.0.0.1", 0)
        if not self.port:
            with socket.socket() as probe:
                probe.bind((self.host, 0))
                self.port = int(probe.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.server: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        self.server = socket.create_server((self.host, self.port))
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def cut(self) -> None:
        assert self.server is not None
        for end in [self.server, *self.sockets]:
            try:
                end.shutdown(socket.SHUT_RDWR)  # also wakes the accepting thread
            except OSError:
                pass
            end.close()
        self.sockets.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self.sockets += [client, upstream]
            for source, sink in [(client, upstream), (upstream, client)]:
                threading.Thread(target=pipe, args=(source, sink), daemon=True).start()
