"""logkeeper.log"""
