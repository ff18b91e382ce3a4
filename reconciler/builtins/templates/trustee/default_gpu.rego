package policy

import rego.v1

# Default GPU attestation policy.
default hardware := 97

hardware := 2 if {
	input.nvgpu.measres == "success"
}
