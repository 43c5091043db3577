"""In-memory adapters: production code with the same contract as the PostgreSQL ones.

store = MemoryStore()                       # one per process (or test)
async with MemoryUnitOfWork(store) as uow:  # one transaction
    ...
    await uow.commit()
"""

from adapters.memory.lease import MemoryLeaderLease, MemoryLeases
from adapters.memory.store import MemoryStore
from adapters.memory.uow import MemoryUnitOfWork

__all__ = ["MemoryLeaderLease", "MemoryLeases", "MemoryStore", "MemoryUnitOfWork"]
