"""RBAC for an operator (not in Kopf): the rules that the engine needs for the handlers
(`planning`), written as YAML (`rendering`), and the commands `kopf rbac generate` and
`kopf rbac verify` (`commands`)."""
