"""Swarms and Executions generated from the CRDs' own schemas, plus deliberate violations, applied
to the real API server with the operator running (issue 13).

For each case, within :data:`BOUND` seconds: either the API server refused an object with a
message that names the field, or the Execution shows a phase and a condition that explains it.
Across the run: the operator never crashes, never logs an unexpected error or an annotation
"Too long", leaves an Invalid Execution alone (no retry writes), and leaves no Pod behind for an
Execution it marked Invalid.

Hypothesis generates the cases up front (``phases=[generate]``, no shrinking: a case takes
seconds on the cluster); they are applied together, so the run takes about a minute for
:data:`CASES` cases. ``AGENTIHOOKS_SWARM_FUZZ_SEED`` replays a run (the seed is printed in the
summary); ``AGENTIHOOKS_SWARM_FUZZ_CASES`` changes the number of cases.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import random
import re
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings, strategies as st
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.fuzz.tally import TALLY
from tests.support import builders, schemas, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory

CASES = int(os.environ.get("AGENTIHOOKS_SWARM_FUZZ_CASES") or 150)
#: Seconds within which every admitted Execution must show a phase and a condition.
BOUND = 45.0
#: Tries of a create the API server answers 429/5xx (a loaded machine): 1+2+4+8+16 s apart.
CREATE_TRIES = 6
#: Seconds an Invalid Execution is watched for writes (a retry would write its progress).
QUIET = 3.0

SWARM_SPEC = schemas.crd_schema("swarm.agentihooks.io_swarms.yaml")["properties"]["spec"]
EXECUTION_SPEC = schemas.crd_schema("swarm.agentihooks.io_executions.yaml")["properties"]["spec"]

#: A ServiceAccount the operator's worker policy allows and the namespace lacks.
MISSING_ACCOUNT = "no-such-account"

Mutation = Callable[[dict[str, Any], dict[str, Any]], None]


def _worker(swarm: dict[str, Any]) -> dict[str, Any]:
    worker: dict[str, Any] = swarm["spec"]["worker"]
    return worker


def _set(path: str, value: Any) -> Mutation:
    """A violation that sets one field of the Swarm (``worker.…``) or the Execution (``exec.…``)."""

    def mutate(swarm: dict[str, Any], execution: dict[str, Any]) -> None:
        target, _, rest = path.partition(".")
        node = _worker(swarm) if target == "worker" else execution if target == "exec" else swarm
        *parents, last = rest.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = copy.deepcopy(value)

    return mutate


def _no_swarm(swarm: dict[str, Any], execution: dict[str, Any]) -> None:
    swarm.clear()


def _outside_registration(swarm: dict[str, Any], execution: dict[str, Any]) -> None:
    execution["spec"]["project"] = "outside-the-registration"
    swarm["spec"].setdefault("registration", {})["projects"] = ["registered"]


#: Each deliberate violation, and where it must be answered: "admission" (the CRD refuses it),
#: "operator" (a phase and condition), or "either".
VIOLATIONS: dict[str, tuple[Mutation, str]] = {
    "quantity not a quantity": (_set("worker.resources", {"limits": {"memory": "nonsense"}}), "admission"),
    "negative quantity": (_set("worker.resources", {"requests": {"cpu": "-1"}}), "admission"),
    "request above limit": (
        _set("worker.resources", {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}),
        "admission",
    ),
    "unknown resource name": (_set("worker.resources", {"limits": {"gpu": "1"}}), "admission"),
    "env value and valueFrom": (
        _set(
            "worker.env",
            [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        ),
        "admission",
    ),
    "env name with =": (_set("worker.env", [{"name": "A=B", "value": "x"}]), "admission"),
    "env duplicate names": (_set("worker.env", [{"name": "A"}, {"name": "A"}]), "admission"),
    "label value too long": (_set("worker.labels", {"team": "x" * 64}), "admission"),
    "annotation key invalid": (_set("worker.annotations", {"bad key!": "x"}), "admission"),
    "image with whitespace": (_set("worker.image", "busybox latest"), "admission"),
    "image not a string": (_set("worker.image", 5), "admission"),
    "terminal port 0": (_set("worker.terminalPort", 0), "admission"),
    "service account name invalid": (_set("worker.serviceAccountName", "Not_Valid"), "admission"),
    "swarm name too long": (_set("swarm.metadata.name", "s" * 46), "admission"),
    "execution name too long": (_set("exec.metadata.name", "e" * 41), "admission"),
    "execution name not a label": (_set("exec.metadata.name", "e.1"), "admission"),
    "spec.swarm not a slug": (_set("exec.spec.swarm", "Bad_Swarm"), "admission"),
    "string task too large": (_set("exec.spec.task", "x" * 1_000_001), "operator"),
    "object task too large": (_set("exec.spec.task", {"goal": "x" * 1_000_001}), "operator"),
    "pod security context refused": (_set("worker.securityContext", {"runAsUser": -1}), "operator"),
    # The operator runs with MISSING_ACCOUNT allowed (WORKER_SERVICE_ACCOUNTS): the API server refuses it.
    "service account missing": (_set("worker.serviceAccountName", MISSING_ACCOUNT), "operator"),
    "service account not allowed": (_set("worker.serviceAccountName", "default"), "operator"),
    "secret not allowed": (
        _set("worker.env", [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}]),
        "operator",
    ),
    "project outside registration": (_outside_registration, "operator"),
    "swarm missing": (_no_swarm, "operator"),
}


#: The answer (phase/reason prefix) each violation planted for the operator must get.
OPERATOR_ANSWERS: dict[str, tuple[str, ...]] = {
    "string task too large": ("Invalid/InvalidSpec",),
    "object task too large": ("Invalid/InvalidSpec",),
    "pod security context refused": ("Invalid/PodRejected",),
    "service account missing": ("Pending/LaunchFailed",),
    "service account not allowed": ("Invalid/WorkerNotAllowed",),
    "secret not allowed": ("Invalid/WorkerNotAllowed",),
    "project outside registration": ("Refused/project_unpermitted", "Done/project_unpermitted"),
    "swarm missing": ("Pending/SwarmNotFound",),
}


@dataclasses.dataclass
class Case:
    name: str
    swarm: dict[str, Any]
    execution: dict[str, Any]
    planted: str
    answer: str = ""
    swarm_refused: str = ""
    execution_refused: str = ""


@st.composite
def _parts(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    return draw(schemas.strategy(SWARM_SPEC, path="spec")), draw(
        schemas.strategy(EXECUTION_SPEC, path="spec")
    )


def generate(*, namespace: str, count: int, seed: int) -> list[Case]:
    """``count`` cases from the schemas, drawn by hypothesis (no shrinking: see the module doc).

    Every violation is planted once (when ``count`` allows), in an order shuffled by ``seed``;
    the other cases are left as the schemas made them.
    """
    drawn: list[tuple[dict[str, Any], dict[str, Any]]] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(parts=_parts())
    def collect(parts: tuple[dict[str, Any], dict[str, Any]]) -> None:
        drawn.append(parts)

    collect()
    plants = [*VIOLATIONS, *["none"] * max(0, count - len(VIOLATIONS))][:count]
    random.Random(seed).shuffle(plants)
    cases = []
    for index, ((swarm_spec, execution_spec), planted) in enumerate(zip(drawn, plants, strict=False)):
        name = f"f{index}"
        swarm = builders.swarm(name=name, namespace=namespace)
        swarm["spec"] = swarm_spec
        execution = builders.execution(name=name, namespace=namespace, swarm=name)
        execution["spec"] = {**execution_spec, "swarm": name}
        projects = swarm_spec.setdefault("registration", {}).setdefault("projects", [])
        if execution_spec["project"] not in projects and index % 4:  # Most are permitted.
            projects.append(execution_spec["project"])
        if planted != "none":
            if VIOLATIONS[planted][1] == "operator":  # On a plain Swarm: no admission refusal masks it.
                swarm["spec"] = builders.swarm(
                    name=name, namespace=namespace, projects=[execution_spec["project"]]
                )["spec"]
            VIOLATIONS[planted][0](swarm, execution)
        cases.append(Case(name=name, swarm=swarm, execution=execution, planted=planted))
    return cases


async def _create(api: client.ApiClient, body: dict[str, Any]) -> str:
    """Create ``body``; return the API server's refusal message, or "" when it was admitted."""
    for attempt in range(CREATE_TRIES):
        try:
            await watching.create(api, body)
            return ""
        except client.ApiException as e:
            if attempt and e.status == 409:  # An earlier try that timed out did create it.
                return ""
            if (e.status == 429 or e.status >= 500) and attempt < CREATE_TRIES - 1:  # The loaded API server.
                TALLY.outcomes["create retried after 429/5xx"] += 1
                await asyncio.sleep(2**attempt)
                continue
            what = f"{body['kind']} {body['metadata']['name'][:50]}"
            TALLY.check(
                "a refusal is a 4xx with a message", 400 <= e.status < 500 and bool(e.body), case=what
            )
            return f"{e.status}: {e.body!s}"
    raise AssertionError("unreachable")


#: The condition that explains each answer, first match wins.
_EXPLAINS = ("Invalid", "SwarmFound", "Launched", "Handed")


def _explained(status: dict[str, Any]) -> str:
    """The answer an Execution's status gives (``phase/reason``), or "" if it gives none yet."""
    phase = status.get("phase")
    conditions = {
        c.get("type"): c for c in status.get("conditions") or [] if c.get("reason") and c.get("message")
    }
    if not phase:
        return ""
    for type_ in _EXPLAINS:
        found = conditions.get(type_)
        if found is not None and not (type_ == "Invalid" and found["status"] == "False"):
            return f"{phase}/{found['reason']}"
    return ""


async def _answer(api: client.ApiClient, namespace: str, case: Case, deadline: float) -> None:
    name = case.execution["metadata"]["name"]
    while not case.answer and time.monotonic() < deadline:
        try:
            found = await watching.execution(api, namespace=namespace, name=name)
        except client.ApiException as e:
            ttl = case.execution["spec"].get("ttlSecondsAfterFinished")
            if e.status != 404 or ttl is None:
                raise
            # The operator deletes a Done Execution after its TTL (nothing else here deletes one):
            # a short generated TTL can end it between two reads.
            case.answer = "Done/expired (its ttlSecondsAfterFinished)"
            return
        case.answer = _explained(found.get("status") or {})
        await asyncio.sleep(0.5)


# Among the slowest tests: CASES generated Swarms and Executions on the real API server with the
# operator running, each given up to BOUND s to be answered, and QUIET s of watching the Invalid
# ones for writes; fewer cases would explore less of the schemas.
async def test_generated_swarms_and_executions_always_get_an_answer(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    seed = int(os.environ.get("AGENTIHOOKS_SWARM_FUZZ_SEED") or random.randrange(2**32))
    TALLY.seed = seed
    print(f"fuzz seed {seed} (AGENTIHOOKS_SWARM_FUZZ_SEED={seed} runs these cases again)")
    cases = generate(namespace=namespace, count=CASES, seed=seed)
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNTS": MISSING_ACCOUNT},
    )
    gate = asyncio.Semaphore(4)

    async def apply(case: Case) -> None:
        async with gate:
            if case.swarm:
                case.swarm_refused = await _create(admin_api, case.swarm)
            case.execution_refused = await _create(admin_api, case.execution)

    started = time.monotonic()
    await asyncio.gather(*(apply(case) for case in cases))
    admitted = [case for case in cases if not case.execution_refused]
    deadline = time.monotonic() + BOUND
    await asyncio.gather(*(_answer(admin_api, namespace, case, deadline) for case in admitted))
    invalid = [case for case in admitted if case.answer.startswith("Invalid/")]
    quiet = await asyncio.gather(*(_quiet(admin_api, namespace, case) for case in invalid))
    log = process.log()

    TALLY.cases += len(cases)
    for case in cases:
        _tally(case)
    await _check_invalid(admin_api, namespace, invalid, quiet)
    TALLY.check("the operator is running", process.running, case="run")
    TALLY.check("no annotation Too long", "Too long" not in log, case="run")
    TALLY.check("no unexpected error", "Traceback" not in log and "Unexpected error" not in log, case="run")
    TALLY.outcomes["seconds"] = round(time.monotonic() - started)
    assert not TALLY.failures, TALLY.summary()


def _tally(case: Case) -> None:
    """Count ``case``'s outcome and check its answer against what was planted in it."""
    TALLY.violations_planted[case.planted] += 1
    where = VIOLATIONS[case.planted][1] if case.planted != "none" else "either"
    if case.swarm_refused:
        TALLY.outcomes["Swarm refused at admission"] += 1
    if case.execution_refused:
        TALLY.outcomes["Execution refused at admission"] += 1
    refused = case.swarm_refused or case.execution_refused
    if not case.execution_refused:
        TALLY.outcomes[f"Execution {case.answer or 'without an answer'}"] += 1
        TALLY.check(
            f"a phase and a condition within {BOUND:g}s",
            bool(case.answer),
            case=f"{case.name} ({case.planted})",
        )
    if where == "operator":
        TALLY.check(
            "a planted operator violation gets its answer",
            case.answer.startswith(OPERATOR_ANSWERS[case.planted]),
            case=f"{case.name} ({case.planted})",
            detail=case.answer,
        )
    if where == "admission":
        TALLY.check(
            "a planted admission violation is refused",
            bool(refused),
            case=f"{case.name} ({case.planted})",
        )
    if refused and case.planted == "none":
        TALLY.unplanted[_why(refused)] += 1
    if refused:
        TALLY.check(
            "the refusal names the field",
            any(part in refused for part in ("spec.", "metadata.name", "Invalid value", "Unsupported value")),
            case=case.name,
            detail=refused[:300],
        )


async def _check_invalid(
    api: client.ApiClient, namespace: str, invalid: list[Case], quiet: list[bool]
) -> None:
    """The Invalid answers: why a Pod was refused (counted), no Pod, and no retry writes."""
    for case in invalid:
        if case.answer == "Invalid/PodRejected":
            found = await watching.execution(api, namespace=namespace, name=case.name)
            message = next(c["message"] for c in found["status"]["conditions"] if c["type"] == "Invalid")
            TALLY.pods_refused[f"{case.planted}: {_why(message.partition(': ')[2])}"] += 1
    for case, still in zip(invalid, quiet, strict=True):
        pod = labels.worker_pod_name(execution=case.execution["metadata"]["name"], generation=1)
        TALLY.check(
            "no pod for an Invalid execution",
            not await watching.pod_exists(api, namespace=namespace, name=pod),
            case=case.name,
        )
        TALLY.check("an Invalid execution is not retried", still, case=f"{case.name} ({case.answer})")


def _why(refused: str) -> str:
    """The field and rule of a refusal, without the object's name or values."""
    try:
        message = str(json.loads(refused.partition(": ")[2]).get("message", refused))
    except ValueError:
        message = refused
    kinds = "Invalid value|Required value|Duplicate value|Unsupported value|Not found"
    fields = re.findall(rf"(spec\.[\w.\[\]-]+|metadata\.name): ({kinds})", message)
    return "; ".join(sorted({f"{field} {kind}" for field, kind in fields})) or message[:120]


async def _quiet(api: client.ApiClient, namespace: str, case: Case) -> bool:
    name = case.execution["metadata"]["name"]
    before = (await watching.execution(api, namespace=namespace, name=name))["metadata"]["resourceVersion"]
    await asyncio.sleep(QUIET)
    after = (await watching.execution(api, namespace=namespace, name=name))["metadata"]["resourceVersion"]
    return bool(before == after)
