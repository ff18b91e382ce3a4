package policy

import rego.v1

default allow = false

# Release resources only to a TEE whose evidence the attestation service affirmed.
allow if {
	input["submods"]["cpu0"]["ear.status"] == "affirming"
}
