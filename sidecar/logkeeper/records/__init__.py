"""logkeeper.records"""
