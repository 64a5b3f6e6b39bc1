"""Pure judging of a refused Pod's evidence: diagnostics, failure classes, fingerprints, causes."""
