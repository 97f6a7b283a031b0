"""`GET /api/cluster/info` (PROTOCOL.md 3, SPEC M8): everything SDK 2.12.0 validates.

Capabilities come from `worker_protocol.server_capabilities()`: only what this server implements.
"""

from __future__ import annotations

from importlib.metadata import version

from fastapi import APIRouter

from burrow.protocol import visibility_values
from burrow.server import (
    external_payload_routes,
    operator_metrics,
    protocol_spec_routes,
    worker_protocol,
)
from burrow.server.deps import AnyCaller, State
from burrow.server.routing import ResponseBody

router = APIRouter()

AUTH_COMPOSITION_CONTRACT: dict[str, object] = {
    "schema": "durable-workflow.v2.auth-composition.contract",
    "version": 1,
    "precedence": {
        "connection_values": ["flag", "environment", "selected_profile", "default"],
        "profile_selection": ["flag_env", "DW_ENV", "current_profile", "default_profile"],
    },
    "canonical_environment": {
        "server_url": "DURABLE_WORKFLOW_SERVER_URL",
        "namespace": "DURABLE_WORKFLOW_NAMESPACE",
        "auth_token": "DURABLE_WORKFLOW_AUTH_TOKEN",
        "tls_verify": "DURABLE_WORKFLOW_TLS_VERIFY",
        "profile": "DW_ENV",
    },
    "auth_material": {
        "token": {"status": "supported", "effective_config_value": "redacted"},
        "mtls": {"status": "reserved"},
        "signed_headers": {"status": "reserved"},
    },
    "effective_config": {
        "required_fields": ["server_url", "namespace", "profile", "auth", "tls", "identity"]
    },
    "redaction": {"never_echo": ["bearer_tokens", "private_keys", "raw_authorization_headers"]},
}


def matching_role(state: State) -> ResponseBody:
    """`topology.matching_role` (SPEC M8, PROTOCOL.md 14): who sweeps and owns re-poll wakes.

    The same block as in operator metrics; it reports the deployment's settings
    (`DW_V2_MATCHING_ROLE_QUEUE_WAKE`), and that this server sweeps in its own process too.
    """
    return operator_metrics.matching_role(state.runtime, state.settings)


def cluster_info(state: State) -> ResponseBody:
    """The discovery document."""
    settings = state.settings
    return {
        "server_id": "burrow",
        "version": version("burrow"),
        "default_namespace": settings.default_namespace,
        "capabilities": {
            "workflow_tasks": True,
            "activity_tasks": True,
            "signals": True,
            "queries": True,
            "updates": True,
            "schedules": True,  # issue 30: /api/schedules (schedule_routes.py)
            "payload_codecs": ["avro"],
        },
        "limits": {
            "max_payload_bytes": state.store.max_payload_bytes,
            # Issue 30: enforced on starts and upserts (burrow.protocol.visibility_values).
            "max_memo_bytes": visibility_values.MAX_MEMO_BYTES,
            "max_search_attributes": visibility_values.MAX_RUN_ATTRIBUTES,
        },
        # PROTOCOL.md 10: the runtime external payload transport the SDK negotiates.
        "namespace": {
            "name": settings.default_namespace,
            "external_payload_storage": external_payload_routes.transport_policy(
                state.store.max_payload_bytes
            ),
        },
        "topology": {
            "schema": "durable-workflow.v2.role-topology",
            "version": 1,
            "current_shape": "standalone_server",
            "current_process_class": "server",
            "current_roles": ["api_ingress", "control_plane", "matching"],
            "execution_mode": "remote_worker_protocol",
            "matching_role": matching_role(state),
        },
        "control_plane": {
            "version": worker_protocol.CONTROL_PLANE_VERSION,
            "header": worker_protocol.CONTROL_PLANE_HEADER,
            "request_contract": {
                "schema": "durable-workflow.v2.control-plane-request.contract",
                "version": 1,
                "operations": {
                    "start": {
                        "fields": {
                            "duplicate_policy": {"canonical_values": ["fail", "use-existing"]}
                        }
                    },
                    "update": {
                        "fields": {
                            "wait_for": {"canonical_values": worker_protocol.UPDATE_WAIT_STAGES}
                        }
                    },
                },
            },
        },
        "worker_protocol": {
            "version": worker_protocol.WORKER_PROTOCOL_VERSION,
            "server_capabilities": worker_protocol.server_capabilities(),
        },
        "auth_composition_contract": AUTH_COMPOSITION_CONTRACT,
        # W9: the machine-readable contracts served, each with the path it is served at.
        "platform_protocol_specs": protocol_spec_routes.catalog(),
    }


@router.get("/api/cluster/info")
async def get_cluster_info(state: State, caller: AnyCaller) -> ResponseBody:
    """Discovery: versions, contracts, capabilities, limits and topology."""
    return cluster_info(state)
