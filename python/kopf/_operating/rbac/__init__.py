"""RBAC for an operator (not in Kopf). `planning`: the rules that the engine needs for the
handlers, and those of the handlers' own requests (`requesting`), found in their code
(`introspecting`: `sources` read, `values` reasoned about, `clients`' calls recognized into
`uses`) or declared (`declaring`, the backing of `kopf.rbac`); `rendering`: as YAML; `commands`:
`kopf rbac generate` and `verify`; `recording`: `kopf rbac record`, and `granting`: what an RBAC
file grants, to compare with."""
