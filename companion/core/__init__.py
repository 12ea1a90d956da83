"""Data types, pure rules, text normal forms and typed errors. Imports nothing else of the project."""
