"""Views of an audit result: text (terminal), json (the contract for tools), markdown and html (reports)."""
