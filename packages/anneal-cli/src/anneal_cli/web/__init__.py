"""`anneal web`: the local studio, eight deep-linkable views over the same run folders as the CLI."""
