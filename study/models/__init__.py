"""Model families: one registration file each (torch-free), torch modules in models/nets/."""
