"""A TCP proxy on 127.0.0.1 that the fault tests break on purpose, in three ways.

* :meth:`TcpProxy.blackhole` — every connection open now stops forwarding without closing: the
  proxy holds both sockets and reads nothing more (the kernel still acknowledges, so neither
  end learns of it from TCP); new connections are accepted and treated the same. This is
  a server that hangs, or a failover that left the old connections half-open.
* :meth:`TcpProxy.heal` — new connections are forwarded again; the blackholed ones stay
  blackholed for ever (the old server is gone, the new one answers).
* :meth:`TcpProxy.refuse` — every connection is closed and the port refuses new ones
  (``Connection refused``), as a stopped server's; :meth:`TcpProxy.restore` listens again on
  the same port (and forwards).
* :meth:`TcpProxy.answer` — every connection is closed; new ones are accepted and handed to a
  function that plays the server (e.g. PostgreSQL "the database system is starting up");
  :meth:`TcpProxy.restore` forwards again.
"""
from __future__ import annotations

import select
import socket
import threading
import time


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client = client
        self.upstream = upstream
        self.dead = upstream is None

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass


class TcpProxy:
    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = port
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._blackholed = False
        self._answer = None
        self._closed = False
        self._listener: socket.socket | None = None
        self._listen()

    # --- faults ----------------------------------------------------------------------------------

    def blackhole(self) -> None:
        with self._lock:
            self._blackholed = True
            for pair in self._pairs:
                pair.dead = True

    def heal(self) -> None:
        with self._lock:
            self._blackholed = False

    def refuse(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def answer(self, play) -> None:
        """New connections go to ``play(socket)`` (run in its own thread; the proxy closes the socket after it)."""
        self._answer = play
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def restore(self) -> None:
        self._answer = None
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self._closed = True
        self.refuse()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return sum(not pair.dead for pair in self._pairs)

    # --- forwarding --------------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed and self._listener is listener:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by refuse()
            play = self._answer
            if play is not None:
                threading.Thread(target=_play, args=(play, client), daemon=True).start()
                continue
            upstream = None
            if not self._blackholed:
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                    upstream.settimeout(None)
                except OSError:
                    client.close()
                    continue
            pair = _Pair(client, upstream)
            with self._lock:
                if self._listener is not listener:
                    pair.close()
                    return
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair: _Pair) -> None:
        while not self._closed:
            if pair.dead:  # held open, never read again
                time.sleep(0.05)
                with self._lock:
                    if pair not in self._pairs:
                        return
                continue
            try:
                ready, _, _ = select.select([pair.client, pair.upstream], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("closed")
                    if pair.dead:
                        break  # blackholed between select and here: the bytes go nowhere
                    (pair.upstream if sock is pair.client else pair.client).sendall(data)
            except (OSError, ValueError):
                with self._lock:
                    if pair in self._pairs:
                        self._pairs.remove(pair)
                pair.close()
                return


def _play(play, sock: socket.socket) -> None:
    try:
        sock.settimeout(5)
        play(sock)
    except OSError:
        pass
    finally:
        sock.close()
