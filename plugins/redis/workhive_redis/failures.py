"""How driver and network failures become workhive errors that name the server, never the password.

The classes are the core's (``workhive.errors``); this module only decides
which one a failure is and writes the message. Who retries what is
``workhive_redis.connections``' business.
"""

from __future__ import annotations

import ssl
from typing import Any

from workhive.errors import OutcomeUnknown, StorageError, StorageUnavailable
from workhive_redis.url import RedisConfig

__all__ = [
    "ACL_RULES",
    "acl_rules",
    "dropped_in_flight",
    "read_only",
    "reason",
    "refusal",
    "still_loading",
    "tls_problem",
    "unreachable",
]

# A TLS failure that is the network's, not the set-up's: the peer went away mid-handshake
# (a restart), which is retried like any dropped connection.
_TRANSIENT_TLS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


#: what a workhive user needs (``ACL SETUSER name on >password`` then these), for the prefix in {prefix}.
#: Keys ``{prefix}:…`` and ``{prefix/pool}:…`` both start with ``{prefix``; so do the pub/sub channels.
#: ``status`` and ``dead`` need the writes too: their scripts first settle items that fell due.
ACL_RULES = (
    "resetkeys ~{{{prefix}* resetchannels &{{{prefix}* "
    "nocommands +@read +@write +evalsha +script|load +time +@pubsub +@connection"
)


#: redis-py's classes for the replies only a cluster node gives, and the reply's first word
_CLUSTER_REPLIES = {
    "MovedError": "MOVED",
    "AskError": "ASK",
    "TryAgainError": "TRYAGAIN",
    "ClusterDownError": "CLUSTERDOWN",
    "ClusterCrossSlotError": "CROSSSLOT",
}


def acl_rules(prefix: str) -> str:
    """The ACL rules (``ACL SETUSER user on >password RULES``) that let a user run workhive under ``prefix``."""
    return ACL_RULES.format(prefix=prefix)


def reason(exc: BaseException) -> str:
    """The first line of a driver error, cut to 300 characters: what messages quote."""
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:300]


def refusal(config: RedisConfig, errors: Any, exc: Exception) -> StorageError:
    """A command the server refused for good (login, ACL, database index, memory): what to do about it.

    ``errors`` is the driver's ``redis.exceptions`` module (imported only once a store opens).
    """
    where = config.where
    text = reason(exc)
    # redis-py strips the word from a redirect ("9567 127.0.0.1:7001" was a MOVED): name it again.
    redirect = _CLUSTER_REPLIES.get(type(exc).__name__) or next(
        (word for word in _CLUSTER_REPLIES.values() if text.startswith(word)), None
    )
    if redirect is not None and not config.cluster:
        return StorageUnavailable(
            f"Redis at {where} answered {redirect} {text.removeprefix(redirect).strip()}: this server is part of a "
            f"Redis Cluster: use redis+cluster://{where}/ (more nodes may follow, comma-separated: "
            "redis+cluster://host:port,host:port/?prefix=…) so workhive follows the cluster's slots",
            where=where,
        )
    if isinstance(exc, errors.AuthenticationError) or "WRONGPASS" in text or "NOAUTH" in text:
        return StorageUnavailable(
            f"Redis at {where} refused the login ({text}); check the user name and the password (in the URL, "
            "its password_file, or WORKHIVE_REDIS_PASSWORD / REDISCLI_AUTH)",
            where=where,
        )
    # A command a script runs is checked too; the server reports that as a plain ERR.
    if isinstance(exc, errors.NoPermissionError) or "NOPERM" in text or "can't run this command" in text:
        return StorageUnavailable(
            f"Redis at {where} does not let this user run what workhive needs ({text}); give it these ACL "
            f"rules: {acl_rules(config.prefix)} (plus +config|get to let status show the persistence settings)",
            where=where,
        )
    if "DB index is out of range" in text or "invalid DB index" in text:
        return StorageUnavailable(
            f"Redis at {where} has no database {config.db} ({text}); use a smaller number in the URL "
            "(redis://host:port/0) or raise the server's `databases` setting",
            where=where,
        )
    if text.startswith("OOM"):
        return StorageError(
            f"Redis at {where} is out of memory ({text}); nothing was stored. Free memory, raise maxmemory, "
            "or purge finished items (workhive purge)",
            where=where,
        )
    return StorageError(f"Redis at {where} refused the command: {text}", where=where)


def still_loading(config: RedisConfig, waited: float, budget: float) -> StorageUnavailable:
    """The server kept answering ``LOADING`` (reading its data after a restart) for the whole wait."""
    return StorageUnavailable(
        f"Redis at {config.where} is still loading its data set after workhive waited "
        f"{round(waited, 1):g}s (retry_for={budget:g}); try again once it "
        "has loaded, or wait longer with ?retry_for=SECONDS in the URL",
        where=config.where,
    )


def dropped_in_flight(config: RedisConfig, exc: BaseException) -> OutcomeUnknown:
    """The connection dropped while a write was in flight: applied once or not at all."""
    return OutcomeUnknown(
        f"the connection to Redis at {config.where} dropped while a write was in flight "
        f"({reason(exc)}): it was applied once or not at all",
        where=config.where,
    )


def read_only(config: RedisConfig, exc: BaseException, budget: float) -> StorageUnavailable:
    """Behind Sentinel: the server named master kept answering ``READONLY`` (a replica) for ``budget`` seconds."""
    return StorageUnavailable(
        f"Redis at {config.where} kept refusing writes as a replica ({reason(exc)}) after workhive asked the "
        f"sentinels again for {budget:g}s; check that their failover finished (SENTINEL MASTERS) and that the "
        "master they name is not configured as a replica",
        where=config.where,
    )


def unreachable(config: RedisConfig, exc: BaseException, budget: float) -> StorageUnavailable:
    """No connection to the server for ``budget`` seconds of retries."""
    return StorageUnavailable(
        f"cannot reach Redis at {config.where}: {reason(exc)} (retried for {budget:g}s); "
        "check that the server runs and the URL's host and port",
        where=config.where,
    )


def tls_problem(config: RedisConfig, exc: BaseException) -> StorageUnavailable | None:
    """A TLS set-up that cannot work (certificate, CA, host name, handshake), found in ``exc``'s chain; else None.

    redis-py wraps the ``ssl`` error in its own ``ConnectionError`` (as the
    context, not the cause), so the chain is walked. Retrying cannot mend a
    certificate, so the caller raises this at once rather than waiting
    ``retry_for`` and then blaming the network.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError) and not isinstance(current, _TRANSIENT_TLS):
            return _tls_message(config, current)
        current = current.__cause__ or current.__context__
    return None


def _tls_message(config: RedisConfig, exc: ssl.SSLError) -> StorageUnavailable:
    where = config.where
    ca = config.tls.get("ssl_ca_certs")
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or reason(exc)
        if "hostname" in detail.lower() or "ip address mismatch" in detail.lower():
            advice = (
                f"the server's certificate is not issued for {config.host}: connect by a name the certificate "
                "lists (subjectAltName), or have it reissued"
            )
        else:
            trusted = f"the CA in ssl_ca_certs={ca}" if ca else "the system's default CAs (no ssl_ca_certs given)"
            advice = (
                f"the server's certificate is not signed by {trusted}: set ssl_ca_certs to the CA file that "
                "signed it, or check that the server presents the certificate you expect"
            )
        return StorageUnavailable(
            f"Redis at {where}: TLS certificate problem ({detail}); {advice}. Not retried: "
            "a certificate does not mend by waiting",
            where=where,
        )
    return StorageUnavailable(
        f"Redis at {where}: TLS handshake failed ({reason(exc)}); check the server's TLS settings (tls-port, "
        "tls-auth-clients: a client certificate via ssl_certfile/ssl_keyfile) against the URL's. Not retried",
        where=where,
    )
