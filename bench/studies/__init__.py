"""Research scaffolding the CLI does not reach, one question per module, and the study files
(``*.toml``) that ``bench/run_study.sh`` runs."""
