package policy

import rego.v1

default allow = false

# IBM Secure Execution: release resources only to an affirmed SE guest.
allow if {
	input["submods"]["cpu0"]["ear.status"] == "affirming"
	input["submods"]["cpu0"]["ear.veraison.annotated-evidence"]["se"]
}
