"""What a Swarm may put in its workers: the cluster admin's policy, and a template's check against it.

Creating a Swarm is creating Pods: whoever may create one chooses what its worker Pods run as
and read. So what a worker template may name is the cluster admin's choice
(``AGENTIHOOKS_SWARM_WORKER_*``, docs/security.md), with safe defaults:

* the ServiceAccount: only the worker's own (the chart's ``RELEASE-worker``, no RBAC), which a
  Pod whose template names none runs as;
* the Secrets its env may read: only names under a prefix (``swarm-worker-``), never the
  operator's worker credentials (``swarm-worker-redis-*``), Helm's releases or the Redis Secrets
  the controller reads; nor may it read another Execution's grant (``swarm-grant-*``). A name is
  what both this check and an admission policy can judge: admission cannot read a Secret's labels;
* the Pod's securityContext: only what Pod Security ``restricted`` allows;
* its labels and annotations: keys without a prefix, or under the prefixes allowed, and never
  under the operator's own domain.

The chart's ValidatingAdmissionPolicy (``templates/worker-policy.yaml``) refuses such a Swarm at
admission with the same rules and the same words; :func:`check` is the same judgement at launch,
for clusters without that policy (or a Swarm admitted before it), where the Execution is left
``Invalid`` (``WorkerNotAllowed``) and no Pod is made. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pydantic

from agentihooks_swarm import resources, settings as settings_
from agentihooks_swarm.kubernetes import labels

#: In a list of names or prefixes: anything.
ANY: Final = "*"
#: Secrets no worker may read, whatever the policy allows: the operator's per-swarm worker Redis
#: credentials (``swarm-worker-redis-<swarm>``, which it mounts into its own swarm's workers
#: itself) and Helm's release records (every value of every release in the namespace).
NEVER_SECRET_PREFIXES: Final = ("swarm-worker-redis-", "sh.helm.release.v1.")
#: ConfigMaps no worker may read: the operator's grants, each another Execution's task.
NEVER_CONFIG_MAP_PREFIXES: Final = ("swarm-grant-",)
#: The operator's own label and annotation domain (and its subdomains): never a template's.
OPERATOR_DOMAIN: Final = labels.GROUP

#: The Pod securityContext fields Pod Security ``restricted`` lets a Pod set, with the rules below.
SECURITY_CONTEXT_FIELDS: Final = (
    "appArmorProfile",
    "fsGroup",
    "fsGroupChangePolicy",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seLinuxChangePolicy",
    "seLinuxOptions",
    "seccompProfile",
    "supplementalGroups",
    "supplementalGroupsPolicy",
    "sysctls",
    "windowsOptions",
)
PROFILE_TYPES: Final = ("RuntimeDefault", "Localhost")
SELINUX_TYPES: Final = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
#: The sysctls Pod Security ``baseline`` (and so ``restricted``) allows: namespaced and safe.
SAFE_SYSCTLS: Final = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)
_RESTRICTED: Final = "Pod Security restricted"


def _names(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


class WorkerPolicy(pydantic.BaseModel):
    """The admin's choices (``AGENTIHOOKS_SWARM_WORKER_*``); the defaults are the safe ones."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    #: The ServiceAccount of a worker whose template names none (None: the namespace's default).
    service_account: str | None = None
    #: Further ServiceAccounts a template may name (``*``: any).
    service_accounts: tuple[str, ...] = ()
    secret_prefixes: tuple[str, ...] = ("swarm-worker-",)
    #: Further Secret names (``*``: any but the never-allowed ones).
    secrets: tuple[str, ...] = ()
    denied_secrets: tuple[str, ...] = ()
    #: Label and annotation key prefixes (``*``: any key but the operator's own).
    metadata_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: settings_.Settings) -> WorkerPolicy:
        return cls(
            service_account=settings.worker_service_account or None,
            service_accounts=_names(settings.worker_service_accounts),
            secret_prefixes=_names(settings.worker_secret_prefixes),
            secrets=_names(settings.worker_secrets),
            denied_secrets=_names(settings.worker_denied_secrets),
            metadata_prefixes=_names(settings.worker_metadata_prefixes),
        )

    @property
    def allowed_service_accounts(self) -> tuple[str, ...]:
        own = (self.service_account,) if self.service_account else ()
        return own + tuple(n for n in self.service_accounts if n != self.service_account)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Violation:
    """One value of a template the policy does not allow: where, what, and what would be."""

    field: str
    #: The value as the message shows it (JSON, or ``key "…"`` for a label or annotation key).
    value: str
    allowed: str

    def __str__(self) -> str:
        return f"{self.field}: {self.value} is not allowed (allowed: {self.allowed})"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def describe(violations: Sequence[Violation]) -> str:
    """All of them in one sentence, for a condition or an Event."""
    return "; ".join(str(v) for v in violations)


# --- the texts of "allowed: …", built the same way by the chart's policy ---------------------------


def service_accounts_text(policy: WorkerPolicy) -> str:
    allowed = policy.allowed_service_accounts
    return ", ".join(allowed) if allowed else "none, leave it unset"


def secrets_text(policy: WorkerPolicy) -> str:
    ways = []
    if policy.secret_prefixes:
        ways.append("names starting with " + ", ".join(policy.secret_prefixes))
    if policy.secrets:
        ways.append("the names " + ", ".join(policy.secrets))
    never = [f"{p}*" for p in NEVER_SECRET_PREFIXES] + list(policy.denied_secrets)
    return (" or ".join(ways) or "none") + "; never " + ", ".join(never)


def config_maps_text() -> str:
    return "any ConfigMap but the operator's grants, " + ", ".join(f"{p}*" for p in NEVER_CONFIG_MAP_PREFIXES)


def metadata_text(policy: WorkerPolicy) -> str:
    under = f", or under {', '.join(policy.metadata_prefixes)}" if policy.metadata_prefixes else ""
    return f"keys without a prefix{under}; never under {OPERATOR_DOMAIN}"


# --- the rules --------------------------------------------------------------------------------------


def secret_allowed(name: str, *, policy: WorkerPolicy) -> bool:
    if name in policy.denied_secrets or name.startswith(NEVER_SECRET_PREFIXES):
        return False
    return ANY in policy.secrets or name in policy.secrets or name.startswith(policy.secret_prefixes)


def key_allowed(key: str, *, policy: WorkerPolicy) -> bool:
    """A label or annotation key: one without a prefix, or under an allowed one; never the operator's."""
    if "/" not in key:
        return True
    domain = key.split("/", 1)[0]
    if domain == OPERATOR_DOMAIN or domain.endswith("." + OPERATOR_DOMAIN):
        return False
    return ANY in policy.metadata_prefixes or key.startswith(policy.metadata_prefixes)


def _service_account(worker: resources.WorkerTemplate, policy: WorkerPolicy) -> list[Violation]:
    name = worker.service_account_name
    allowed = policy.allowed_service_accounts
    if not name or ANY in allowed or name in allowed:
        return []
    return [_bad("spec.worker.serviceAccountName", _json(name), service_accounts_text(policy))]


def _env(worker: resources.WorkerTemplate, policy: WorkerPolicy) -> list[Violation]:
    found = []
    for index, entry in enumerate(worker.env):
        source = entry.get("valueFrom") if isinstance(entry, Mapping) else None
        source = source if isinstance(source, Mapping) else {}
        where = f"spec.worker.env[{index}].valueFrom"
        secret = _name(source.get("secretKeyRef"))
        if secret is not None and not secret_allowed(secret, policy=policy):
            found.append(_bad(f"{where}.secretKeyRef.name", _json(secret), secrets_text(policy)))
        config_map = _name(source.get("configMapKeyRef"))
        if config_map is not None and config_map.startswith(NEVER_CONFIG_MAP_PREFIXES):
            found.append(_bad(f"{where}.configMapKeyRef.name", _json(config_map), config_maps_text()))
    return found


def _name(reference: Any) -> str | None:
    name = reference.get("name") if isinstance(reference, Mapping) else None
    return name if isinstance(name, str) else None


def _bad(field: str, value: str, allowed: str) -> Violation:
    return Violation(field=field, value=value, allowed=allowed)


def _restricted(field: str, value: Any, allowed: str) -> Violation:
    """A securityContext value Pod Security ``restricted`` does not allow."""
    return _bad(f"spec.worker.securityContext.{field}", _json(value), f"{allowed}; {_RESTRICTED}")


def _not_a(kind: str, field: str, allowed: str) -> Violation:
    """A securityContext field of the wrong shape (the API server would refuse the Pod too)."""
    return _bad(f"spec.worker.securityContext.{field}", f"a non-{kind}", f"{allowed}; {_RESTRICTED}")


def _profile(context: Mapping[str, Any], field: str) -> list[Violation]:
    if field not in context:
        return []
    profile = context[field]
    if not isinstance(profile, Mapping):
        return [_not_a("object", field, "an object")]
    kind = profile.get("type")
    return [] if kind in PROFILE_TYPES else [_restricted(f"{field}.type", kind, ", ".join(PROFILE_TYPES))]


def _selinux(context: Mapping[str, Any]) -> list[Violation]:
    if "seLinuxOptions" not in context:
        return []
    options = context["seLinuxOptions"]
    if not isinstance(options, Mapping):
        return [_not_a("object", "seLinuxOptions", "an object")]
    found = []
    if "type" in options and options["type"] not in SELINUX_TYPES:
        allowed = ", ".join(t or '""' for t in SELINUX_TYPES)
        found.append(_restricted("seLinuxOptions.type", options["type"], allowed))
    found += [
        _restricted(f"seLinuxOptions.{name}", options[name], "unset")
        for name in ("user", "role")
        if name in options and options[name] != ""
    ]
    return found


def _sysctls(context: Mapping[str, Any]) -> list[Violation]:
    if "sysctls" not in context:
        return []
    sysctls, allowed = context["sysctls"], ", ".join(SAFE_SYSCTLS)
    if not isinstance(sysctls, list):
        return [_not_a("list", "sysctls", allowed)]
    names = [s.get("name") if isinstance(s, Mapping) else None for s in sysctls]
    return [
        _restricted(f"sysctls[{i}].name", n, allowed) for i, n in enumerate(names) if n not in SAFE_SYSCTLS
    ]


def _security_context(worker: resources.WorkerTemplate) -> list[Violation]:
    context = worker.security_context
    fields = ", ".join(SECURITY_CONTEXT_FIELDS)
    found = [
        _bad("spec.worker.securityContext", f"key {_json(key)}", f"{fields}; {_RESTRICTED}")
        for key in context
        if key not in SECURITY_CONTEXT_FIELDS
    ]
    if "runAsNonRoot" in context and context["runAsNonRoot"] is not True:
        found.append(_restricted("runAsNonRoot", context["runAsNonRoot"], "true"))
    user = context.get("runAsUser")
    if isinstance(user, int | float) and not isinstance(user, bool) and user == 0:
        found.append(_restricted("runAsUser", user, "any user but root (0)"))
    found += _profile(context, "seccompProfile")
    found += _profile(context, "appArmorProfile")
    found += _selinux(context)
    found += _sysctls(context)
    windows = context.get("windowsOptions")
    if isinstance(windows, Mapping) and windows.get("hostProcess") is True:
        found.append(_restricted("windowsOptions.hostProcess", True, "false"))
    return found


def _metadata(worker: resources.WorkerTemplate, policy: WorkerPolicy) -> list[Violation]:
    return [
        _bad(f"spec.worker.{field}", f"key {_json(key)}", metadata_text(policy))
        for field, keys in (("labels", worker.labels), ("annotations", worker.annotations))
        for key in keys
        if not key_allowed(key, policy=policy)
    ]


def check(worker: resources.WorkerTemplate, *, policy: WorkerPolicy) -> tuple[Violation, ...]:
    """Every value of ``worker`` that ``policy`` does not allow (none: it may launch)."""
    return (
        *_service_account(worker, policy),
        *_env(worker, policy),
        *_security_context(worker),
        *_metadata(worker, policy),
    )


def service_account(worker: resources.WorkerTemplate, *, policy: WorkerPolicy) -> str | None:
    """The ServiceAccount the worker Pod runs as: the template's, else the policy's (None: the
    namespace's ``default``)."""
    return worker.service_account_name or policy.service_account


def launchable(swarm: resources.SwarmSpec, *, policy: WorkerPolicy) -> resources.SwarmSpec:
    """``swarm`` as its worker Pod is built: the template's ServiceAccount filled in with
    :func:`service_account` (a Pod that names none runs as the policy's, not the namespace's
    ``default``)."""
    name = service_account(swarm.worker, policy=policy)
    if name == swarm.worker.service_account_name:
        return swarm
    worker = swarm.worker.model_copy(update={"service_account_name": name})
    return swarm.model_copy(update={"worker": worker})
