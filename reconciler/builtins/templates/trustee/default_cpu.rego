package policy

import rego.v1

# Default CPU attestation policy: trust vectors per TEE (EAR appraisal).
default executables := 33
default hardware := 97
default configuration := 36

executables := 3 if {
	input.sample.launch_digest in data.reference.launch_digest
}

hardware := 2 if {
	input.sample.productId in data.reference.productId
}

configuration := 2 if {
	input.sample.debug == false
}
