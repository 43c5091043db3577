"""For fake node gateways in tests that only speak the control stream: the file calls
(checkpoints, an output file asked for) answer UNIMPLEMENTED (a daemon then keeps nothing, and
says so in its log)."""

from __future__ import annotations

from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError


class NoCheckpointCalls:
    async def OfferCheckpoint(self, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, "this test gateway keeps no checkpoints")

    async def PutCheckpointFile(self, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, "this test gateway keeps no checkpoints")

    async def GetCheckpointFile(self, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, "this test gateway keeps no checkpoints")

    async def PutOutputFile(self, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, "this test gateway asks for no output file")
