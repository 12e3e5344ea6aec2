"""A Streamlit client over the app's own websocket protocol, for load benchmarks and serving tests.

It speaks what the browser speaks on `/_stcore/stream`: BackMsg.rerun_script with the query string,
the page, the widget states and (for fragments) the fragment id, plus the hashes of the large
messages it already holds, so the server may answer with a reference instead of re-sending them.
A rerun is finished at ForwardMsg.script_finished. Wire bytes are counted below the websocket
layer, so they are what permessage-deflate leaves when the server compresses.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection

OK_FINISHES = {
    ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY,
    ForwardMsg.ScriptFinishedStatus.FINISHED_FRAGMENT_RUN_SUCCESSFULLY,
}


class CountingConnection(ClientConnection):
    """Counts the bytes that arrive on the socket (compressed frames, headers included)."""

    wire_bytes = 0

    def data_received(self, data: bytes) -> None:
        self.wire_bytes += len(data)
        super().data_received(data)


@dataclass
class Rerun:
    """What one rerun brought back."""

    seconds: float
    wire_bytes: int
    message_bytes: int
    status: int
    exceptions: list[str] = field(default_factory=list)
    elements: dict[str, str] = field(default_factory=dict)  # widget/element key -> element type
    texts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in OK_FINISHES and not self.exceptions


def _key_of(element_id: str) -> str:
    # Streamlit's ids end with the user key: "$$ID-<hash>-<key>".
    return element_id.rsplit("-", 1)[-1] if element_id.startswith("$$ID-") else element_id


class Session:
    """One browser tab: a websocket, its widgets (by key) and its message cache."""

    def __init__(
        self,
        url: str,
        page: str = "",
        query: str = "",
        timeout: float = 120,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = headers or {}
        self.page = page
        self.query = query
        self.timeout = timeout
        self.ws: CountingConnection | None = None
        self.widgets: dict[str, tuple[str, str]] = {}  # key -> (widget id, fragment id)
        self.states: dict[str, WidgetState] = {}  # widget id -> state we set
        self.cached: set[str] = set()
        self.drawn: dict[str, tuple[str, str]] = {}  # a cached message's hash -> (key, type)
        self.page_hash = ""  # the server names the page in new_session; reruns repeat it
        self.auto: dict[str, float] = {}  # fragment id -> seconds (st.fragment(run_every=...))

    async def __aenter__(self) -> Session:
        ws_url = self.url.replace("http", "ws", 1) + "/_stcore/stream"
        self.ws = await websockets.connect(
            ws_url,
            subprotocols=["streamlit"],
            origin=self.url,
            max_size=None,
            open_timeout=self.timeout,
            create_connection=CountingConnection,
            additional_headers=self.headers,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def rerun(self, fragment: str = "", auto: bool = False) -> Rerun:
        msg = BackMsg()
        rs = msg.rerun_script
        rs.is_auto_rerun = auto
        rs.query_string = self.query
        rs.page_name = self.page
        rs.page_script_hash = self.page_hash
        rs.fragment_id = fragment
        rs.widget_states.widgets.extend(self.states.values())
        rs.cached_message_hashes.extend(sorted(self.cached))
        t0 = time.perf_counter()
        wire0 = self.ws.wire_bytes
        await self.ws.send(msg.SerializeToString())
        return await self._until_finished(t0, wire0)

    async def wait_for(self, key: str, timeout: float) -> Rerun | None:
        """Do what the browser does for fragments with run_every (rerun them at their interval)
        until an element with `key` arrives; None if it does not within `timeout` s."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if not self.auto:
                return None
            fragment, interval = next(iter(self.auto.items()))
            await asyncio.sleep(interval)
            run = await self.rerun(fragment, auto=True)
            if key in run.elements:
                return run
        return None

    async def _until_finished(self, t0: float, wire0: int) -> Rerun:
        run = Rerun(0.0, 0, 0, -1)
        while True:
            left = self.timeout - (time.perf_counter() - t0)
            raw = await asyncio.wait_for(self.ws.recv(), max(left, 0.001))
            run.message_bytes += len(raw)
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if fwd.metadata.cacheable and fwd.hash:
                self.cached.add(fwd.hash)
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                seen = self._see(fwd.delta.new_element, fwd.delta.fragment_id, run)
                if seen and fwd.metadata.cacheable and fwd.hash:
                    self.drawn[fwd.hash] = seen
            elif kind == "ref_hash" and fwd.ref_hash in self.drawn:
                # a message this tab holds already (an identical element): drawn from its cache
                key, element = self.drawn[fwd.ref_hash]
                run.elements[key] = element
            elif kind == "navigation":
                self.page_hash = fwd.navigation.page_script_hash
            elif kind == "auto_rerun":
                self.auto[fwd.auto_rerun.fragment_id] = fwd.auto_rerun.interval
            elif kind == "stop_auto_rerun":
                for fragment in fwd.stop_auto_rerun.fragment_ids:
                    self.auto.pop(fragment, None)
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.ScriptFinishedStatus.FINISHED_EARLY_FOR_RERUN:
                    continue  # st.rerun(): the run that follows is part of this one
                run.status = fwd.script_finished
                run.seconds = time.perf_counter() - t0
                run.wire_bytes = self.ws.wire_bytes - wire0
                return run

    def _see(self, element, fragment: str, run: Rerun) -> tuple[str, str] | None:
        """Note an element that arrived; its (key, type) when it has a key."""
        kind = element.WhichOneof("type")
        body = getattr(element, kind)
        if kind == "exception":
            run.exceptions.append(f"{body.type}: {body.message}")
            return None
        if kind in ("markdown", "alert"):
            run.texts.append(body.body)
        element_id = body.id if "id" in body.DESCRIPTOR.fields_by_name else ""
        if not element_id:
            return None
        key = _key_of(element_id)
        run.elements[key] = kind
        self.widgets[key] = (element_id, fragment)
        return key, kind

    def set(self, key: str, **value) -> str:
        """Set widget `key` (e.g. double_array_value=[3]); returns its fragment id ('' = page)."""
        if key not in self.widgets:
            raise KeyError(f"no widget with key {key!r} on the page (seen: {sorted(self.widgets)})")
        widget_id, fragment = self.widgets[key]
        state = WidgetState(id=widget_id)
        for name, v in value.items():
            target = getattr(state, name)
            if hasattr(target, "data"):
                target.data.extend(v)
            else:
                setattr(state, name, v)
        self.states[widget_id] = state
        return fragment
