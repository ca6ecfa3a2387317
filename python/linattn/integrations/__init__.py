"""linattn under other libraries' models: `linattn.integrations.transformers.enable()` makes the
linear-attention models of Hugging Face transformers run their recurrences, short convolutions and
packed full attention through linattn on the CPU (docs/models.md). Each integration is imported on
demand, so that `import linattn` never imports transformers."""
