# cython: language_level=3
"""How a channel of the asyncio transport makes, hands out and settles the futures of its
confirm-mode publishes, compiled (``io_asyncio.ChannelWaits`` is this with the waiting;
``thread_future.ConfirmFutures`` is the blocking transport's twin).

The futures are the loop's own (``asyncio.Future``): what is compiled is the making and
the settling around them, which in Python cost three frames per publish (``new_token``,
the loop's ``create_future``, ``issued``) and a Python loop per ack frame.
"""
import asyncio
from asyncio.base_events import BaseEventLoop

cdef object _Future = asyncio.Future
cdef object _BASE_CREATE_FUTURE = BaseEventLoop.create_future


cdef class BatchFuture:
    """The confirm token of a publish_encoded batch: settles its future when the last of
    ``count`` publishes is acked, or at the first failure."""

    cdef readonly object future
    cdef public Py_ssize_t pending

    def __init__(self, future, Py_ssize_t count):
        self.future = future
        self.pending = count
        if count == 0:
            future.set_result(None)

    def done(self):
        return self.future.done()

    def set_result(self, value):
        self.pending -= 1
        if self.pending <= 0 and not self.future.done():
            self.future.set_result(value)

    def set_exception(self, error):
        if not self.future.done():
            self.future.set_exception(error)

    def exception(self):
        return self.future.exception()


cdef class _UserCallback:
    """A publish future's callback, whose exception (or coroutine) the connection handles."""

    cdef object connection, callback, channel

    def __init__(self, connection, callback, channel):
        self.connection = connection
        self.callback = callback
        self.channel = channel

    def __call__(self, future):
        self.connection._call_user(self.callback, future, "publish", self.channel)


cdef class LoopConfirmFutures:
    """A channel's confirm futures on the loop."""

    def __init__(self, channel, connection, loop):
        self._channel = channel
        self._connection = connection
        self._loop = loop
        # A loop that makes its futures as BaseEventLoop does (asyncio's own loops): made here,
        # as it would, without its Python frame.  Any other loop is asked.
        self._plain_loop = getattr(type(loop), "create_future", None) is _BASE_CREATE_FUTURE

    cpdef object new_token(self, Py_ssize_t count, object callback):
        """The future of ``count`` confirm-mode publishes (one, or a publish_encoded batch)."""
        if self._plain_loop:
            future = _Future(loop=self._loop)
        else:
            future = self._loop.create_future()
        if callback is not None:
            future.add_done_callback(_UserCallback(self._connection, callback, self._channel))
        return future if count == 1 else BatchFuture(future, count)

    cpdef object issued(self, object token, unsigned long long seqno):
        """What the caller gets for a token: its future."""
        return (<BatchFuture>token).future if type(token) is BatchFuture else token

    @staticmethod
    def acked(list tokens):
        """Settle the futures of publishes the broker acked (one ack frame's: the hot path
        of confirms)."""
        loop_settle_acked(tokens)

    @staticmethod
    def token_error(token):
        """How a token failed."""
        return token.exception()


cdef int loop_settle_acked(list tokens) except -1:
    """``LoopConfirmFutures.acked``, for compiled callers."""
    for token in tokens:
        if not token.done():
            token.set_result(None)
    return 0
